#define NCCL_MAJOR ${nccl:Major}
#define NCCL_MINOR ${nccl:Minor}
