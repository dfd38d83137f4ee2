/* SPDX-License-Identifier: MIT */
/*
 * The few CUDA driver and runtime ABI facts the hooks need, written from the
 * public documentation of the API (no NVIDIA header is included or copied):
 * integer result codes, opaque handles, and the leading members of
 * CUmemAllocationProp.
 */
#ifndef TFA_CUDA_HOOKS_CUDA_ABI_H
#define TFA_CUDA_HOOKS_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int cudaError_t;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* 64-bit: the _v2 ABI */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long cuuint64_t;
typedef struct CUstream_st *CUstream;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef int CUdriverProcAddressQueryResult;

#define CUDA_SUCCESS                  0
#define CUDA_ERROR_INVALID_VALUE      1
#define CUDA_ERROR_OUT_OF_MEMORY      2
#define CUDA_ERROR_NOT_INITIALIZED    3
#define cudaSuccess                   0
#define cudaErrorMemoryAllocation     2
#define cudaErrorInitializationError  3

#define CU_GET_PROC_ADDRESS_SUCCESS   0

/* The special streams: the legacy default stream and the per-thread one. */
#define TFA_CU_STREAM_LEGACY      ((CUstream)0x1)
#define TFA_CU_STREAM_PER_THREAD  ((CUstream)0x2)

/* CUmemLocationType */
#define TFA_CU_MEM_LOCATION_TYPE_DEVICE 1

/* CUmemAllocationProp, up to its location (the rest is not read). */
typedef struct tfa_cu_mem_allocation_prop_s {
	int type;                 /* CUmemAllocationType */
	int requested_handle_types;
	struct {
		int type;         /* CUmemLocationType: 1 device, 2.. host kinds */
		int id;
	} location;
} tfa_cu_mem_allocation_prop_t;

#endif /* TFA_CUDA_HOOKS_CUDA_ABI_H */
