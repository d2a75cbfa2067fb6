/* The reference timing for `nccl-find smoke`: the plainest all-reduce loop
 * (blocking communicators, five warm-ups, back-to-back ncclAllReduce, one synchronization
 * at the end), float32, out of place. It needs no CUDA or NCCL headers:
 * libcuda.so.1 and the NCCL file are opened with dlopen, and the few
 * prototypes are declared here. Build anywhere with gcc:
 *
 *   gcc -O2 -o gpu-ref scripts/gpu-ref.c -ldl
 *
 *   gpu-ref LIBNCCL NGPUS NRANKS FIRST_RANK FIRST_GPU IDFILE ITERS SIZE...
 *
 * One process drives NGPUS GPUs from FIRST_GPU on, as ranks FIRST_RANK on.
 * With several processes, the one with FIRST_RANK 0 writes NCCL's unique id
 * to IDFILE and the others wait for it. Prints one line per size:
 *   bytes time_us algbw_GBps busbw_GBps
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*fn_i)();
typedef struct { char b[128]; } uid_t128;

static void *need(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) { fprintf(stderr, "missing %s\n", name); exit(2); }
  return p;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CK(x) do { int rc_ = (x); if (rc_) { fprintf(stderr, "%s: %d\n", #x, rc_); exit(1); } } while (0)

int main(int argc, char **argv) {
  if (argc < 9) {
    fprintf(stderr, "usage: %s LIBNCCL NGPUS NRANKS FIRST_RANK FIRST_GPU IDFILE ITERS SIZE...\n", argv[0]);
    return 2;
  }
  int ngpus = atoi(argv[2]), nranks = atoi(argv[3]), first = atoi(argv[4]), gpu0 = atoi(argv[5]);
  const char *idfile = argv[6];
  int iters = atoi(argv[7]);
  void *cu = dlopen("libcuda.so.1", RTLD_NOW);
  void *nc = dlopen(argv[1], RTLD_NOW);
  if (!cu || !nc) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
  int (*cuInit)(unsigned) = need(cu, "cuInit");
  int (*cuDeviceGet)(int *, int) = need(cu, "cuDeviceGet");
  int (*cuRetain)(void **, int) = need(cu, "cuDevicePrimaryCtxRetain");
  int (*cuSetCurrent)(void *) = need(cu, "cuCtxSetCurrent");
  int (*cuMalloc)(unsigned long long *, size_t) = need(cu, "cuMemAlloc_v2");
  int (*cuMemsetD8)(unsigned long long, unsigned char, size_t) = need(cu, "cuMemsetD8_v2");
  int (*cuStreamCreate)(void **, unsigned) = need(cu, "cuStreamCreate");
  int (*cuStreamSync)(void *) = need(cu, "cuStreamSynchronize");
  int (*getId)(uid_t128 *) = need(nc, "ncclGetUniqueId");
  int (*initRank)(void **, int, uid_t128, int) = need(nc, "ncclCommInitRank");
  int (*allReduce)(const void *, void *, size_t, int, int, void *, void *) = need(nc, "ncclAllReduce");
  fn_i groupStart = need(nc, "ncclGroupStart"), groupEnd = need(nc, "ncclGroupEnd");

  size_t maxb = 8;
  for (int a = 8; a < argc; a++) { size_t b = strtoull(argv[a], 0, 10); if (b > maxb) maxb = b; }
  uid_t128 id;
  if (first == 0) {
    CK(getId(&id));
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", idfile, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1) { perror("idfile"); return 1; }
    fclose(f);
    rename(tmp, idfile);
  } else {
    for (;;) {
      FILE *f = fopen(idfile, "rb");
      if (f && fread(&id, sizeof id, 1, f) == 1) { fclose(f); break; }
      if (f) fclose(f);
      usleep(10000);
    }
  }
  CK(cuInit(0));
  void *ctx[16], *st[16], *comm[16];
  unsigned long long sb[16], rb[16];
  for (int g = 0; g < ngpus; g++) {
    int dev;
    CK(cuDeviceGet(&dev, gpu0 + g));
    CK(cuRetain(&ctx[g], dev));
    CK(cuSetCurrent(ctx[g]));
    CK(cuStreamCreate(&st[g], 0));
    CK(cuMalloc(&sb[g], maxb));
    CK(cuMalloc(&rb[g], maxb));
    CK(cuMemsetD8(sb[g], 0, maxb));
  }
  CK(groupStart());
  for (int g = 0; g < ngpus; g++) {
    CK(cuSetCurrent(ctx[g]));
    CK(initRank(&comm[g], nranks, id, first + g));
  }
  CK(groupEnd());
  for (int a = 8; a < argc; a++) {
    size_t bytes = strtoull(argv[a], 0, 10), count = bytes / 4 ? bytes / 4 : 1;
    for (int rep = -5; rep < iters; rep++) {
      double t0 = 0;
      if (rep == 0) {
        for (int g = 0; g < ngpus; g++) { CK(cuSetCurrent(ctx[g])); CK(cuStreamSync(st[g])); }
        t0 = now();
        for (int i = 0; i < iters; i++) {
          CK(groupStart());
          for (int g = 0; g < ngpus; g++) CK(allReduce((void *)sb[g], (void *)rb[g], count, 7, 0, comm[g], st[g]));
          CK(groupEnd());
        }
        for (int g = 0; g < ngpus; g++) { CK(cuSetCurrent(ctx[g])); CK(cuStreamSync(st[g])); }
        double dt = (now() - t0) / iters, algbw = count * 4.0 / dt / 1e9;
        if (first == 0)
          printf("%zu %.2f %.2f %.2f\n", count * 4, dt * 1e6, algbw, algbw * 2.0 * (nranks - 1) / nranks);
        fflush(stdout);
        break;
      }
      CK(groupStart());
      for (int g = 0; g < ngpus; g++) CK(allReduce((void *)sb[g], (void *)rb[g], count, 7, 0, comm[g], st[g]));
      CK(groupEnd());
    }
  }
  if (first == 0) unlink(idfile);
  return 0;
}
