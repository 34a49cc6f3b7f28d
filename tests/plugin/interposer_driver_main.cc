// An "unchanged training program" for the interposer test: links the fake
// libnccl.so.2 and uses only the public NCCL API. Run with LD_PRELOAD of the
// plugin, the interposer sees every call. Prints one line per step; exit 0
// if every call returned ncclSuccess.
#include <cstdio>
#include <cstring>

extern "C" {
struct FakeComm;
struct UniqueId {
  char internal[128];
};
int ncclCommInitRank(FakeComm** comm, int nranks, UniqueId id, int rank);
int ncclCommSplit(FakeComm* comm, int color, int key, FakeComm** out, void*);
int ncclCommAbort(FakeComm* comm);
int ncclCommFinalize(FakeComm* comm);
int ncclCommDestroy(FakeComm* comm);
}

int main(int argc, char** argv) {
  UniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (argc > 1 && std::strcmp(argv[1], "fail") == 0) {
    // A misconfigured job: creation fails, the program reports and exits.
    std::strcpy(id.internal, "fail:NET/IB : No device found.");
    FakeComm* comm = nullptr;
    const int r = ncclCommInitRank(&comm, 8, id, 3);
    std::printf("init %d\n", r);
    return r == 2 ? 3 : 1;
  }
  std::strcpy(id.internal, "pitstop-interposer-test");
  FakeComm* world = nullptr;
  FakeComm* half = nullptr;
  int r = 0;
  r |= ncclCommInitRank(&world, 8, id, 3);
  std::printf("init %d\n", r);
  r |= ncclCommSplit(world, 1, 3, &half, nullptr);
  std::printf("split %d\n", r);
  r |= ncclCommAbort(half);
  std::printf("abort %d\n", r);
  r |= ncclCommFinalize(world);
  r |= ncclCommDestroy(world);
  std::printf("destroy %d\n", r);
  return r == 0 ? 0 : 1;
}
