/* SPDX-License-Identifier: MIT */
/*
 * The layout of preload/tfalloc.h's structures as the C compiler sees it:
 * one line of JSON, {"STRUCT": {"size": N, "fields": {"FIELD": OFFSET, ...}}},
 * for test_python_api.py to compare with tools/python/tfalloc.py's ctypes
 * mirror, member by member.  Needs no shim.
 */
#include <stddef.h>
#include <stdio.h>

#include "preload/tfalloc.h"

static int first_struct = 1, first_field;

static void
begin(const char *name, size_t size)
{
	printf("%s\"%s\": {\"size\": %zu, \"fields\": {", first_struct ? "" : ", ", name, size);
	first_struct = 0;
	first_field = 1;
}

static void
field(const char *name, size_t offset)
{
	printf("%s\"%s\": %zu", first_field ? "" : ", ", name, offset);
	first_field = 0;
}

static void
end(void)
{
	printf("}}");
}

#define F(type, member) field(#member, offsetof(type, member))

int
main(void)
{
	printf("{");
	begin("tfalloc_resource_handle", sizeof(tfalloc_resource_handle_t));
	F(tfalloc_resource_handle_t, id);
	F(tfalloc_resource_handle_t, reserved);
	F(tfalloc_resource_handle_t, hash_code);
	F(tfalloc_resource_handle_t, device);
	F(tfalloc_resource_handle_t, container);
	F(tfalloc_resource_handle_t, name);
	F(tfalloc_resource_handle_t, maybe_type_name);
	end();

	begin("tfalloc_stats", sizeof(tfalloc_stats_t));
	F(tfalloc_stats_t, num_allocs);
	F(tfalloc_stats_t, num_frees);
	F(tfalloc_stats_t, bytes_in_use);
	F(tfalloc_stats_t, peak_bytes_in_use);
	F(tfalloc_stats_t, largest_alloc_size);
	F(tfalloc_stats_t, total_bytes);
	F(tfalloc_stats_t, bytes_limit);
	F(tfalloc_stats_t, allocated_bytes_in_use);
	F(tfalloc_stats_t, peak_allocated_bytes_in_use);
	F(tfalloc_stats_t, total_allocated_bytes);
	end();

	begin("tfalloc_resource_info", sizeof(tfalloc_resource_info_t));
	F(tfalloc_resource_info_t, handle);
	F(tfalloc_resource_info_t, refcount);
	F(tfalloc_resource_info_t, deleted);
	F(tfalloc_resource_info_t, memory_used);
	F(tfalloc_resource_info_t, peak_memory_used);
	F(tfalloc_resource_info_t, bytes_limit);
	F(tfalloc_resource_info_t, debug_string);
	end();

	begin("tfalloc_cleanup_result", sizeof(tfalloc_cleanup_result_t));
	F(tfalloc_cleanup_result_t, blocks);
	F(tfalloc_cleanup_result_t, bytes);
	F(tfalloc_cleanup_result_t, resources);
	end();

	begin("tfalloc_pointer_info", sizeof(tfalloc_pointer_info_t));
	F(tfalloc_pointer_info_t, requested_size);
	F(tfalloc_pointer_info_t, allocated_size);
	F(tfalloc_pointer_info_t, allocation_id);
	F(tfalloc_pointer_info_t, resource_id);
	F(tfalloc_pointer_info_t, device);
	end();

	begin("tfalloc_container_info", sizeof(tfalloc_container_info_t));
	F(tfalloc_container_info_t, container);
	F(tfalloc_container_info_t, name);
	F(tfalloc_container_info_t, resource_is_private_to_kernel);
	end();

	begin("tfalloc_api", sizeof(struct tfalloc_api));
	F(struct tfalloc_api, version);
	F(struct tfalloc_api, size);
	F(struct tfalloc_api, scope_enter);
	F(struct tfalloc_api, scope_enter_handle);
	F(struct tfalloc_api, scope_exit);
	F(struct tfalloc_api, resource_create);
	F(struct tfalloc_api, resource_lookup);
	F(struct tfalloc_api, resource_lookup_or_create);
	F(struct tfalloc_api, resource_unref);
	F(struct tfalloc_api, resource_delete);
	F(struct tfalloc_api, resource_delete_handle);
	F(struct tfalloc_api, resource_info);
	F(struct tfalloc_api, resource_set_limit);
	F(struct tfalloc_api, resource_stats);
	F(struct tfalloc_api, container_cleanup);
	F(struct tfalloc_api, clear);
	F(struct tfalloc_api, container_info);
	F(struct tfalloc_api, device_stats);
	F(struct tfalloc_api, dump_profile);
	F(struct tfalloc_api, pointer_info);
	end();
	printf(", \"constants\": {\"TFALLOC_API_VERSION\": %d, \"TFALLOC_NAME_MAX\": %d, "
	       "\"TFALLOC_DEBUG_MAX\": %d, \"TFALLOC_ENOTACTIVE\": %d, \"TFALLOC_EINVAL\": %d, "
	       "\"TFALLOC_ENAMETOOLONG\": %d, \"TFALLOC_ENOENT\": %d, \"TFALLOC_EEXIST\": %d, "
	       "\"TFALLOC_ESCOPE\": %d, \"TFALLOC_ENOMEM\": %d, \"TFALLOC_EIO\": %d}",
	       TFALLOC_API_VERSION, TFALLOC_NAME_MAX, TFALLOC_DEBUG_MAX, TFALLOC_ENOTACTIVE, TFALLOC_EINVAL,
	       TFALLOC_ENAMETOOLONG, TFALLOC_ENOENT, TFALLOC_EEXIST, TFALLOC_ESCOPE, TFALLOC_ENOMEM,
	       TFALLOC_EIO);
	printf("}\n");
	return 0;
}
