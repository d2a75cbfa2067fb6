/* Fixture NCCL 1-style nccl.h for nccl-find's tests, written by the
 * nccl-find authors. NCCL 1 headers define no version macros; they are
 * recognised by NCCL 1's result codes. */
#ifndef NCCL_H_
#define NCCL_H_
typedef enum { ncclSuccess, ncclUnhandledCudaError, ncclSystemError, ncclInternalError,
               ncclInvalidDevicePointer, ncclInvalidRank, ncclUnsupportedDeviceCount,
               ncclDeviceNotFound, ncclInvalidDeviceIndex, ncclLibWrapperNotSet,
               ncclCudaMallocFailed, ncclRankMismatch } ncclResult_t;
ncclResult_t ncclCommInitRank(void *comm, int ndev, void *commId, int rank);
#endif
