/* The saved state of one exported CUDA graph, as the generated graph.c defines it and apic_cuda_runtime.c reads
 * it (apic/c_library/cuda.py writes it). Internal to the library (its symbols are local to the shared object). */
#ifndef APIC_CUDA_IMAGE_H
#define APIC_CUDA_IMAGE_H

#include <stdint.h>

#define APIC_CUDA_MAX_DIMS 8

/* one step per op of the recording; a branch goes to step `count` if the int32 at dst is zero, a jump always */
enum { APIC_STEP_NOP = 0, APIC_STEP_KERNEL = 1, APIC_STEP_MEMCPY = 2, APIC_STEP_MEMSET = 3, APIC_STEP_BRANCH = 4,
       APIC_STEP_JUMP = 5 };
/* what an arena word points at: a region's device memory, or the fill kernel's constants */
enum { APIC_CUDA_TARGET_REGION = 1, APIC_CUDA_TARGET_CONSTANTS = 2 };

typedef struct apic_cuda_module {
    const unsigned char* data; /* PTX (NUL-terminated) or CUBIN, as saved */
    int64_t nbytes;
    int is_ptx;
    const char* file;
    const char* arch; /* "sm_75" */
} apic_cuda_module;

typedef struct apic_cuda_kernel {
    const char* symbol;
    int64_t module;
    int64_t smem; /* dynamic shared memory above the default its launches need (0: none) */
    int64_t nparams; /* its parameters in the file (-1: apic's own kernel, not checked) */
    const int64_t* layout; /* (offset, size) of each */
} apic_cuda_kernel;

/* one op of the replay, as apic.replay.cuda.lowering lowers it */
typedef struct apic_cuda_step {
    int64_t kind, function, grid[3], block[3], smem, params_start, nparams;
    int64_t dst_region, dst_offset, src_region, src_offset, value, width, count;
} apic_cuda_step;

typedef struct apic_cuda_reloc { int64_t at, kind, index, offset; } apic_cuda_reloc;

typedef struct apic_cuda_binding {
    const char* name;
    int kind;
    const char* dtype;
    int64_t region, offset, nbytes, elem_size;
    int ndim;
    int64_t shape[APIC_CUDA_MAX_DIMS];
    int64_t strides[APIC_CUDA_MAX_DIMS];
    int64_t lo, hi; /* the bytes of the region the view reaches */
} apic_cuda_binding;

typedef struct apic_cuda_image {
    int abi_version;
    int64_t nmodules;
    const apic_cuda_module* modules;
    int64_t nkernels;
    const apic_cuda_kernel* kernels;
    int64_t nregions;
    const int64_t* region_sizes;
    const int64_t* region_offsets; /* into regions; -1: the region starts zeroed */
    const unsigned char* regions;
    int64_t constants_size;
    const unsigned char* constants;
    int64_t arena_size;
    const unsigned char* arena; /* kernel parameters in host memory, pointers as offsets (relocs) */
    int64_t nrelocs;
    const apic_cuda_reloc* relocs;
    int64_t nparams;
    const int64_t* params; /* the arena offset of each parameter of each kernel step */
    int64_t nsteps;
    const apic_cuda_step* steps;
    int64_t nbindings;
    const apic_cuda_binding* bindings;
} apic_cuda_image;

#endif
