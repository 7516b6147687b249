/* A stand-in for the CUDA runtime's page-locking calls (test_pinning.py): records what the
 * loader registers and unregisters, and fails on request, so pin_memory's ring is tested on
 * machines without a GPU. Each registered range is read at both ends, as the real runtime
 * touches every page. */
#include <stddef.h>

#define MAX_REGIONS 256

static size_t starts[MAX_REGIONS];
static size_t lengths[MAX_REGIONS];
static int live[MAX_REGIONS];
static int regions = 0;
static int refuse = 0;

int cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
    if (refuse) return 2;                  /* cudaErrorMemoryAllocation */
    if (flags != 1 || size == 0) return 1; /* cudaErrorInvalidValue: the loader asks portable */
    for (int i = 0; i < regions; i++)
        if (live[i] && (size_t)ptr < starts[i] + lengths[i] && starts[i] < (size_t)ptr + size)
            return 712; /* cudaErrorHostMemoryAlreadyRegistered */
    if (regions == MAX_REGIONS) return 2;
    volatile unsigned char *bytes = ptr;
    (void)bytes[0];
    (void)bytes[size - 1];
    starts[regions] = (size_t)ptr;
    lengths[regions] = size;
    live[regions] = 1;
    regions++;
    return 0;
}

int cudaHostUnregister(void *ptr) {
    for (int i = 0; i < regions; i++)
        if (live[i] && starts[i] == (size_t)ptr) {
            live[i] = 0;
            return 0;
        }
    return 713; /* cudaErrorHostMemoryNotRegistered */
}

const char *cudaGetErrorName(int error) {
    switch (error) {
    case 1: return "cudaErrorInvalidValue";
    case 2: return "cudaErrorMemoryAllocation";
    case 712: return "cudaErrorHostMemoryAlreadyRegistered";
    default: return "cudaErrorUnknown";
    }
}

/* For the test: regions registered so far (live or not), one's start, length and liveness. */
int fake_regions(void) { return regions; }
size_t fake_start(int i) { return starts[i]; }
size_t fake_length(int i) { return lengths[i]; }
int fake_live(int i) { return live[i]; }
void fake_refuse(int on) { refuse = on; }
