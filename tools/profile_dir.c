/* SPDX-License-Identifier: MIT */
#include "tools/profile_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether name is a profile's file name (*.prof, more than the suffix). */
static bool
is_profile_name(const char *name)
{
	size_t n = strlen(name);

	return n > 5 && strcmp(name + n - 5, ".prof") == 0;
}

/* "uid-" and digits only: the name the shim gives a user's subdirectory. */
static bool
is_uid_dir_name(const char *name)
{
	if (strncmp(name, "uid-", 4) != 0 || name[4] == '\0')
		return false;
	return strspn(name + 4, "0123456789") == strlen(name + 4);
}

struct list {
	char **paths;
	size_t n, cap;
};

static int
list_add(struct list *l, const char *dir, const char *name)
{
	if (l->n == l->cap) {
		size_t cap = l->cap == 0 ? 64 : l->cap * 2;
		char **arr = realloc(l->paths, cap * sizeof(*arr));
		if (arr == NULL)
			return -ENOMEM;
		l->paths = arr;
		l->cap = cap;
	}
	size_t len = strlen(dir);
	if (asprintf(&l->paths[l->n], "%s%s%s", dir, len > 0 && dir[len - 1] == '/' ? "" : "/", name) < 0)
		return -ENOMEM;
	l->n++;
	return 0;
}

/*
 * The profiles of one directory; with subdirs, its uid-N subdirectories too.
 * Files of a subdirectory must be regular files (fstatat without following).
 */
static int
list_dir(struct list *l, const char *dir, bool subdirs)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int err = 0;

	if (d == NULL)
		return -errno;
	while (err == 0 && (de = readdir(d)) != NULL) {
		struct stat st;
		if (subdirs && is_uid_dir_name(de->d_name)) {
			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
				continue;
			char *sub;
			size_t len = strlen(dir);
			if (asprintf(&sub, "%s%s%s", dir, len > 0 && dir[len - 1] == '/' ? "" : "/", de->d_name) < 0) {
				err = -ENOMEM;
				break;
			}
			int r = list_dir(l, sub, false);
			free(sub);
			if (r == -ENOMEM)
				err = r;
			continue;
		}
		if (!is_profile_name(de->d_name))
			continue;
		if (!subdirs
		    && (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)))
			continue;
		err = list_add(l, dir, de->d_name);
	}
	closedir(d);
	return err;
}

static int
path_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int
tfa_profile_dir_list(const char *dir, char ***paths, size_t *n)
{
	struct list l = { 0 };
	int err = list_dir(&l, dir, true);

	if (err != 0) {
		tfa_profile_dir_free(l.paths, l.n);
		*paths = NULL;
		*n = 0;
		return err;
	}
	if (l.n > 0)
		qsort(l.paths, l.n, sizeof(*l.paths), path_cmp);
	*paths = l.paths;
	*n = l.n;
	return 0;
}

void
tfa_profile_dir_free(char **paths, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
}

void
tfa_profile_dir_tidy(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL)
		if (is_uid_dir_name(de->d_name))
			(void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR); /* refused unless empty */
	closedir(d);
}
