/* The runtime of an exported apic CUDA graph: opens the CUDA driver library with dlopen, loads the graph's
 * modules (cuModuleLoadData), allocates and fills its regions, lays its kernel parameters out in host memory
 * with their pointers relocated to those regions, and replays its ops on the caller's stream with the calls
 * apic's Python replay makes in launch mode (apic/replay/cuda/lowering.py: enqueue_step; cuda/rows.py: the
 * context entered only where it is not current already).
 *
 * Built with -DAPIC_PREFIX=<name>: every public function is <name>_<function> (the header, <name>.h). */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apic_cuda_image.h"
#include "apic_export_api.h"

#define APIC_CAT2(a, b) a##_##b
#define APIC_CAT(a, b) APIC_CAT2(a, b)
#define API(x) APIC_CAT(APIC_PREFIX, x)

extern const apic_cuda_image apic_cuda_graph; /* the generated graph.c */

typedef int CUresult;
typedef uint64_t CUdeviceptr;
#define DEFAULT_DRIVER "libcuda.so.1"
#define MAX_DYNAMIC_SHARED_SIZE 8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
#define NON_PORTABLE_CLUSTER_SIZE_ALLOWED 14 /* CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED */
#define COMPUTE_CAPABILITY_MAJOR 75 /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
#define DEFAULT_MAX_LOOP_ITERATIONS (1LL << 24)

/* the driver's entry points, by the symbols cuda.h maps the API names to */
#define DRIVER_CALLS(X)                                                                                   \
    X(cuInit, "cuInit", (unsigned))                                                                       \
    X(cuDeviceGet, "cuDeviceGet", (int*, int))                                                            \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int*, int, int))                                     \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (void**, int))                                \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (int))                                   \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", (void**))                                                       \
    X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", (void*))                                                   \
    X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", (void**))                                                    \
    X(cuCtxSynchronize, "cuCtxSynchronize", (void))                                                       \
    X(cuStreamSynchronize, "cuStreamSynchronize", (void*))                                                \
    X(cuModuleLoadData, "cuModuleLoadData", (void**, const void*))                                        \
    X(cuModuleUnload, "cuModuleUnload", (void*))                                                          \
    X(cuModuleGetFunction, "cuModuleGetFunction", (void**, void*, const char*))                           \
    X(cuFuncSetAttribute, "cuFuncSetAttribute", (void*, int, int))                                        \
    X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr*, size_t))                                                \
    X(cuMemFree, "cuMemFree_v2", (CUdeviceptr))                                                           \
    X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr, const void*, size_t))                                \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void*, CUdeviceptr, size_t))                                      \
    X(cuMemsetD8, "cuMemsetD8_v2", (CUdeviceptr, unsigned char, size_t))                                  \
    X(cuLaunchKernel, "cuLaunchKernel",                                                                   \
      (void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**)) \
    X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", (CUdeviceptr, CUdeviceptr, size_t, void*))               \
    X(cuMemsetD8Async, "cuMemsetD8Async", (CUdeviceptr, unsigned char, size_t, void*))                    \
    X(cuMemsetD16Async, "cuMemsetD16Async", (CUdeviceptr, unsigned short, size_t, void*))                 \
    X(cuMemsetD32Async, "cuMemsetD32Async", (CUdeviceptr, unsigned, size_t, void*))                       \
    X(cuGetErrorName, "cuGetErrorName", (CUresult, const char**))

typedef struct driver {
    void* library;
    CUresult (*cuFuncGetParamInfo)(void*, size_t, size_t*, size_t*); /* CUDA 12.4+ drivers: NULL before */
#define FIELD(name, symbol, args) CUresult(*name) args;
    DRIVER_CALLS(FIELD)
#undef FIELD
} driver_t;

struct API(instance) {
    driver_t cu;
    int device, retained;
    void* context;
    void** modules;
    void** functions;
    CUdeviceptr* regions;
    CUdeviceptr constants;
    unsigned char* arena;
    void** params;
    int64_t max_loop_iterations;
    char error[512];
};
typedef struct API(instance) instance_t;

static __thread char open_error[512];

static int fail(char* buffer, int status, const char* format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(buffer, 512, format, args);
    va_end(args);
    return status;
}

static const char* error_name(const driver_t* cu, CUresult code) {
    const char* name = NULL;
    if (cu->cuGetErrorName && cu->cuGetErrorName(code, &name) == 0 && name) return name;
    return "an unknown CUresult";
}

/* a driver call's result: APIC_OK, or APIC_ERROR_DRIVER with `what` and the driver's error in `buffer` */
#define CALL(buffer, what, call)                                                                          \
    do {                                                                                                  \
        CUresult result_ = (call);                                                                        \
        if (result_)                                                                                      \
            return fail(buffer, APIC_ERROR_DRIVER, "%s failed: %s (%d)", what, error_name(&g->cu, result_), \
                        result_);                                                                         \
    } while (0)

int API(abi_version)(void) { return APIC_EXPORT_ABI_VERSION; }

static int load_driver(instance_t* g, const char* path) {
    if (!path || !*path) path = getenv("APIC_CUDA_DRIVER");
    if (!path || !*path) path = DEFAULT_DRIVER;
    g->cu.library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!g->cu.library)
        return fail(open_error, APIC_ERROR_DRIVER, "open: cannot open the CUDA driver library '%.200s' (%.200s); "
                    "install the NVIDIA driver, or name the library (open's driver_library, APIC_CUDA_DRIVER)",
                    path, dlerror());
#define LOOKUP(name, symbol, args)                                                                          \
    if (!(*(void**)&g->cu.name = dlsym(g->cu.library, symbol)))                                              \
        return fail(open_error, APIC_ERROR_DRIVER, "open: the CUDA driver library '%.200s' has no %s (a driver " \
                    "too old for this library)", path, symbol);
    DRIVER_CALLS(LOOKUP)
#undef LOOKUP
    *(void**)&g->cu.cuFuncGetParamInfo = dlsym(g->cu.library, "cuFuncGetParamInfo");
    return APIC_OK;
}

int API(close)(instance_t* g) {
    const apic_cuda_image* im = &apic_cuda_graph;
    if (!g) return APIC_OK;
    if (g->context && g->cu.cuCtxPushCurrent(g->context) == 0) {
        void* popped = NULL;
        g->cu.cuCtxSynchronize();
        for (int64_t r = 0; g->regions && r < im->nregions; r++)
            if (g->regions[r]) g->cu.cuMemFree(g->regions[r]);
        if (g->constants) g->cu.cuMemFree(g->constants);
        for (int64_t m = 0; g->modules && m < im->nmodules; m++)
            if (g->modules[m]) g->cu.cuModuleUnload(g->modules[m]);
        g->cu.cuCtxPopCurrent(&popped);
    }
    if (g->retained) g->cu.cuDevicePrimaryCtxRelease(g->device);
    /* the driver library stays loaded: the CUDA driver's threads and exit handlers do not survive an unload */
    free(g->modules);
    free(g->functions);
    free(g->regions);
    free(g->arena);
    free(g->params);
    free(g);
    return APIC_OK;
}

/* the context-current part of open: modules, functions, memory, parameters */
/* a kernel's parameter layout in its module against the file's, where the driver can tell (as
 * apic/replay/cuda/loaded_graph.py's _check_params) */
static int check_params(instance_t* g, const apic_cuda_kernel* kernel, void* fn) {
    size_t offset = 0, size = 0;
    if (!g->cu.cuFuncGetParamInfo || kernel->nparams < 0) return APIC_OK;
    for (int64_t p = 0; p < kernel->nparams; p++) {
        if (g->cu.cuFuncGetParamInfo(fn, (size_t)p, &offset, &size)) {
            if (p == 0) return APIC_OK; /* this driver cannot tell */
            return fail(open_error, APIC_ERROR_ARGUMENT, "open: kernel %.300s has %lld parameters in its module, the "
                        "graph file says %lld", kernel->symbol, (long long)p, (long long)kernel->nparams);
        }
        if ((int64_t)offset != kernel->layout[2 * p] || (int64_t)size != kernel->layout[2 * p + 1])
            return fail(open_error, APIC_ERROR_ARGUMENT, "open: kernel %.300s: parameter %lld is [offset %zu, %zu "
                        "bytes] in its module, [offset %lld, %lld bytes] in the graph file", kernel->symbol, (long long)p,
                        offset, size, (long long)kernel->layout[2 * p], (long long)kernel->layout[2 * p + 1]);
    }
    if (!g->cu.cuFuncGetParamInfo(fn, (size_t)kernel->nparams, &offset, &size))
        return fail(open_error, APIC_ERROR_ARGUMENT, "open: kernel %.300s has more parameters in its module than the "
                    "graph file's %lld", kernel->symbol, (long long)kernel->nparams);
    return APIC_OK;
}

static int load(instance_t* g) {
    const apic_cuda_image* im = &apic_cuda_graph;
    char* e = open_error;
    char what[400];
    for (int64_t m = 0; m < im->nmodules; m++) {
        const apic_cuda_module* mod = &im->modules[m];
        snprintf(what, sizeof what, "open: cuModuleLoadData of module '%.200s' (%s for %s)", mod->file,
                 mod->is_ptx ? "PTX" : "CUBIN", mod->arch);
        void* module = NULL; /* kept only once loaded: close unloads what it holds */
        CALL(e, what, g->cu.cuModuleLoadData(&module, mod->data));
        g->modules[m] = module;
    }
    int major = 0;
    CALL(e, "open: cuDeviceGetAttribute (the compute capability)",
         g->cu.cuDeviceGetAttribute(&major, COMPUTE_CAPABILITY_MAJOR, g->device));
    for (int64_t k = 0; k < im->nkernels; k++) {
        const apic_cuda_kernel* kernel = &im->kernels[k];
        snprintf(what, sizeof what, "open: cuModuleGetFunction of kernel %.300s", kernel->symbol);
        CALL(e, what, g->cu.cuModuleGetFunction(&g->functions[k], g->modules[kernel->module], kernel->symbol));
        int status = check_params(g, kernel, g->functions[k]);
        if (status) return status;
        if (kernel->smem)
            CALL(e, "open: cuFuncSetAttribute (its dynamic shared memory)",
                 g->cu.cuFuncSetAttribute(g->functions[k], MAX_DYNAMIC_SHARED_SIZE, (int)kernel->smem));
        /* cluster dims above 8 are compiled in and need the opt-in on sm_90+: best effort, as Warp and apic's
         * Python load do (a driver without the attribute keeps clusters portable) */
        if (major >= 9) g->cu.cuFuncSetAttribute(g->functions[k], NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
    }
    for (int64_t r = 0; r < im->nregions; r++) {
        size_t size = (size_t)im->region_sizes[r];
        CUdeviceptr pointer = 0; /* kept only once allocated: close frees what it holds */
        CALL(e, "open: cuMemAlloc of the graph's memory", g->cu.cuMemAlloc(&pointer, size ? size : 1));
        g->regions[r] = pointer;
        if (im->region_offsets[r] >= 0)
            CALL(e, "open: cuMemcpyHtoD of the saved state",
                 g->cu.cuMemcpyHtoD(g->regions[r], im->regions + im->region_offsets[r], size));
        else if (size)
            CALL(e, "open: cuMemsetD8 of the graph's memory", g->cu.cuMemsetD8(g->regions[r], 0, size));
    }
    if (im->constants_size) {
        CUdeviceptr pointer = 0;
        CALL(e, "open: cuMemAlloc of the fill values", g->cu.cuMemAlloc(&pointer, (size_t)im->constants_size));
        g->constants = pointer;
        CALL(e, "open: cuMemcpyHtoD of the fill values",
             g->cu.cuMemcpyHtoD(g->constants, im->constants, (size_t)im->constants_size));
    }
    memcpy(g->arena, im->arena, (size_t)im->arena_size);
    for (int64_t k = 0; k < im->nrelocs; k++) {
        const apic_cuda_reloc* rel = &im->relocs[k];
        int region = rel->kind == APIC_CUDA_TARGET_REGION && rel->index >= 0 && rel->index < im->nregions;
        if (rel->at < 0 || rel->at + 8 > im->arena_size || (!region && rel->kind != APIC_CUDA_TARGET_CONSTANTS))
            return fail(e, APIC_ERROR_ARGUMENT, "open: the library's parameters are corrupt (relocation %lld)",
                        (long long)k);
        uint64_t address = (region ? g->regions[rel->index] : g->constants) + (uint64_t)rel->offset;
        memcpy(g->arena + rel->at, &address, 8);
    }
    for (int64_t p = 0; p < im->nparams; p++) g->params[p] = g->arena + im->params[p];
    /* the uploads went to the legacy stream; a replay on a non-blocking stream would not wait for them */
    CALL(e, "open: cuCtxSynchronize", g->cu.cuCtxSynchronize());
    return APIC_OK;
}

int API(open)(int abi_version, const char* driver_library, int device, instance_t** out) {
    const apic_cuda_image* im = &apic_cuda_graph;
    if (!out) return fail(open_error, APIC_ERROR_ARGUMENT, "open: the output pointer is NULL");
    *out = NULL;
    if (abi_version != APIC_EXPORT_ABI_VERSION || im->abi_version != APIC_EXPORT_ABI_VERSION)
        return fail(open_error, APIC_ERROR_ABI, "open: the caller was built for apic export ABI %d; this library "
                    "is ABI %d (rebuild the caller against this library's header)", abi_version,
                    APIC_EXPORT_ABI_VERSION);
    if (device < 0) return fail(open_error, APIC_ERROR_ARGUMENT, "open: device %d is negative", device);
    instance_t* g = (instance_t*)calloc(1, sizeof *g);
    if (!g) return fail(open_error, APIC_ERROR_MEMORY, "open: out of memory");
    g->max_loop_iterations = DEFAULT_MAX_LOOP_ITERATIONS;
    g->modules = (void**)calloc((size_t)im->nmodules + 1, sizeof(void*));
    g->functions = (void**)calloc((size_t)im->nkernels + 1, sizeof(void*));
    g->regions = (CUdeviceptr*)calloc((size_t)im->nregions + 1, sizeof(CUdeviceptr));
    g->params = (void**)calloc((size_t)im->nparams + 1, sizeof(void*));
    if (posix_memalign((void**)&g->arena, 64, (size_t)im->arena_size + 64)) g->arena = NULL;
    if (!g->modules || !g->functions || !g->regions || !g->params || !g->arena) {
        API(close)(g);
        return fail(open_error, APIC_ERROR_MEMORY, "open: out of memory");
    }
    int status = load_driver(g, driver_library);
    if (status) {
        API(close)(g);
        return status;
    }
    char* e = open_error;
    status = g->cu.cuInit(0);
    if (status) {
        status = fail(e, APIC_ERROR_DRIVER, "open: the CUDA driver cannot be initialised: cuInit failed: %s (%d)",
                      error_name(&g->cu, status), status);
    } else if ((status = g->cu.cuDeviceGet(&g->device, device))) {
        status = fail(e, APIC_ERROR_DRIVER, "open: no CUDA device %d: cuDeviceGet failed: %s (%d)", device,
                      error_name(&g->cu, status), status);
    } else if ((status = g->cu.cuDevicePrimaryCtxRetain(&g->context, g->device))) {
        g->context = NULL;
        status = fail(e, APIC_ERROR_DRIVER, "open: cuDevicePrimaryCtxRetain failed: %s (%d)",
                      error_name(&g->cu, status), status);
    } else {
        g->retained = 1;
        status = g->cu.cuCtxPushCurrent(g->context);
        if (status) {
            status = fail(e, APIC_ERROR_DRIVER, "open: cuCtxPushCurrent failed: %s (%d)",
                          error_name(&g->cu, status), status);
        } else {
            void* popped = NULL;
            status = load(g);
            g->cu.cuCtxPopCurrent(&popped);
        }
    }
    if (status) {
        API(close)(g);
        return status;
    }
    *out = g;
    return APIC_OK;
}

const char* API(last_error)(const instance_t* g) { return g ? g->error : open_error; }

/* --- replay --------------------------------------------------------------------------------------------- */
static CUresult issue(instance_t* g, const apic_cuda_step* s, void* stream, const char** call) {
    const apic_cuda_image* im = &apic_cuda_graph;
    CUdeviceptr dst = g->regions[s->dst_region] + (CUdeviceptr)s->dst_offset;
    switch (s->kind) {
    case APIC_STEP_KERNEL:
        *call = "cuLaunchKernel";
        return g->cu.cuLaunchKernel(g->functions[s->function], (unsigned)s->grid[0], (unsigned)s->grid[1],
                                    (unsigned)s->grid[2], (unsigned)s->block[0], (unsigned)s->block[1],
                                    (unsigned)s->block[2], (unsigned)s->smem, stream, g->params + s->params_start,
                                    NULL);
    case APIC_STEP_MEMCPY:
        *call = "cuMemcpyDtoDAsync";
        return g->cu.cuMemcpyDtoDAsync(dst, g->regions[s->src_region] + (CUdeviceptr)s->src_offset,
                                       (size_t)s->count, stream);
    case APIC_STEP_MEMSET:
        if (s->width == 1) return *call = "cuMemsetD8Async", g->cu.cuMemsetD8Async(dst, (unsigned char)s->value,
                                                                                     (size_t)s->count, stream);
        if (s->width == 2) return *call = "cuMemsetD16Async", g->cu.cuMemsetD16Async(dst, (unsigned short)s->value,
                                                                                       (size_t)s->count, stream);
        return *call = "cuMemsetD32Async", g->cu.cuMemsetD32Async(dst, (unsigned)s->value, (size_t)s->count, stream);
    }
    (void)im;
    *call = "an unknown step";
    return 1;
}

/* one pass over the steps; a failed call's name in *call (a condition is read as apic/replay/cuda/conditional.py
 * reads it: the stream synchronized, then a 4-byte copy to the host) */
static CUresult pass(instance_t* g, void* stream, const char** call, int64_t* at) {
    const apic_cuda_image* im = &apic_cuda_graph;
    int64_t jumps = 0;
    for (int64_t k = 0; k < im->nsteps;) {
        const apic_cuda_step* s = &im->steps[k];
        CUresult result = 0;
        *at = k;
        if (s->kind == APIC_STEP_BRANCH) {
            int32_t value = 0;
            *call = "cuStreamSynchronize";
            if ((result = g->cu.cuStreamSynchronize(stream))) return result;
            *call = "cuMemcpyDtoH";
            CUdeviceptr cond = g->regions[s->dst_region] + (CUdeviceptr)s->dst_offset;
            if ((result = g->cu.cuMemcpyDtoH(&value, cond, 4))) return result;
            k = value ? k + 1 : s->count;
        } else if (s->kind == APIC_STEP_JUMP) {
            if (s->count <= k && g->max_loop_iterations && ++jumps > g->max_loop_iterations) {
                *call = NULL; /* the loop cap */
                return 1;
            }
            k = s->count;
        } else if (s->kind == APIC_STEP_NOP) {
            k++;
        } else {
            if ((result = issue(g, s, stream, call))) return result;
            k++;
        }
    }
    return 0;
}

int API(replay)(instance_t* g, void* stream, int64_t repeats) {
    const apic_cuda_image* im = &apic_cuda_graph;
    if (!g) return APIC_ERROR_ARGUMENT;
    if (repeats < 0) return fail(g->error, APIC_ERROR_ARGUMENT, "replay: %lld repeats", (long long)repeats);
    if (!repeats || !im->nsteps) return APIC_OK;
    void* current = NULL;
    CALL(g->error, "replay: cuCtxGetCurrent", g->cu.cuCtxGetCurrent(&current));
    int pushed = current != g->context;
    if (pushed) CALL(g->error, "replay: cuCtxPushCurrent", g->cu.cuCtxPushCurrent(g->context));
    int status = APIC_OK;
    for (int64_t n = 0; n < repeats && !status; n++) {
        const char* call = "";
        int64_t at = 0;
        CUresult result = pass(g, stream, &call, &at);
        if (result && !call)
            status = fail(g->error, APIC_ERROR_LOOP_LIMIT, "replay: the loops ran more than %lld iterations in replay "
                          "%lld (the cap: set_max_loop_iterations); the replay stopped at op %lld",
                          (long long)g->max_loop_iterations, (long long)n, (long long)at);
        else if (result)
            status = fail(g->error, APIC_ERROR_DRIVER, "replay: %s failed: %s (%d) at op %lld of replay %lld; the ops "
                          "before it were issued", call, error_name(&g->cu, result), result, (long long)at,
                          (long long)n);
    }
    if (pushed) {
        void* popped = NULL;
        CUresult result = g->cu.cuCtxPopCurrent(&popped);
        if (result && !status)
            status = fail(g->error, APIC_ERROR_DRIVER, "replay: cuCtxPopCurrent failed: %s (%d)",
                          error_name(&g->cu, result), result);
    }
    return status;
}

int API(set_max_loop_iterations)(instance_t* g, int64_t count) {
    if (!g) return APIC_ERROR_ARGUMENT;
    if (count < 0)
        return fail(g->error, APIC_ERROR_ARGUMENT, "set_max_loop_iterations: %lld is negative", (long long)count);
    g->max_loop_iterations = count;
    return APIC_OK;
}

#include "apic_cuda_bindings.inc"
