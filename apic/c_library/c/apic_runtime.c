/* The runtime of an exported apic graph: opens instances from the saved state (apic_image.h), relocating the
 * op table and the arena to the instance's memory, and replays the table. The interpreter is apic's reference
 * interpreter (apic/replay/cpu/reference.py) for the opcodes an export keeps (apic/c_library/relocatable.py: PORTED),
 * and the natives are Warp's (warp/native/warp.cpp, crt.cpp) that the kernels and those rows call.
 *
 * Built with -DAPIC_PREFIX=<name>: every public function is <name>_<function> (the header, <name>.h). */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apic_export_api.h"
#include "apic_image.h"

#define APIC_CAT2(a, b) a##_##b
#define APIC_CAT(a, b) APIC_CAT2(a, b)
#define API(x) APIC_CAT(APIC_PREFIX, x)

extern const apic_image apic_graph_image; /* the generated <name>_graph.c */

/* op-table opcodes (apic/replay/cpu/table.py) */
enum { OP_NOP = 0, OP_CALL2 = 2, OP_CALL3 = 3, OP_CALL4 = 4, OP_CALL5 = 5, OP_CALL10 = 10, OP_JUMP = 16,
       OP_BRANCH_IF_ZERO = 17, OP_SEGMENTED_SORT = 21, OP_CHECK_INDICES = 23 };
enum { COL_OPCODE = 0, COL_FN = 1, COL_ARG0 = 2, COL_LOOP = 4 };
#define ALIGN 64
#define DEFAULT_MAX_LOOP_ITERATIONS (1LL << 24)

struct API(instance) {
    int64_t* table;
    unsigned char* arena;
    unsigned char** regions;
    int64_t* loop_counts;
    unsigned char** scalar_values;
    int64_t max_loop_iterations;
    char error[512];
};
typedef struct API(instance) instance_t;

static __thread char open_error[512];
/* Replays of every instance take turns: Warp's CPU kernels save and set a static pointer to their tile memory
 * on entry (warp/native/tile.h, one per kernel object, not per thread), which tile code reads. */
static pthread_mutex_t replay_lock = PTHREAD_MUTEX_INITIALIZER;
/* a kernel's failed assertion (_wp_assert) returns to the replay that ran it, on its thread */
static __thread jmp_buf* assert_return;
static __thread char assert_message[400];

static int fail(char* buffer, int status, const char* format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(buffer, 512, format, args);
    va_end(args);
    return status;
}

/* --- the natives of Warp's runtime that kernels and table rows call --------------------------------------- */
int _wp_isfinite(double x) { return isfinite(x); }
int _wp_isnan(double x) { return isnan(x); }
int _wp_isinf(double x) { return isinf(x); }

void _wp_assert(const char* expression, const char* file, unsigned int line) {
    if (assert_return) {
        snprintf(assert_message, sizeof assert_message, "assertion failed: '%s' at '%s:%u'", expression, file, line);
        longjmp(*assert_return, 1);
    }
    abort(); /* as Warp: only reached by a kernel called outside a replay */
}

static void native_memcpy_h2h(int64_t dest, int64_t src, int64_t n) { memcpy((void*)dest, (const void*)src, (size_t)n); }
static void native_memset_host(int64_t dest, int64_t value, int64_t n) { memset((void*)dest, (int)value, (size_t)n); }
/* warp <= 1.12's memset_host: a size that is a multiple of 4 is filled with `value` as 4-byte ints */
static void native_memset_words(int64_t dest, int64_t value, int64_t n) {
    if (n % 4) {
        memset((void*)dest, (int)value, (size_t)n);
        return;
    }
    for (int64_t i = 0; i < n / 4; i++) ((int*)dest)[i] = (int)value;
}

#define TILE(T)                                    \
    {                                              \
        T* d = (T*)dst;                            \
        T v = *(const T*)src;                      \
        while (n--) *d++ = v;                      \
    }
static void native_memtile_host(int64_t dest, int64_t source, int64_t srcsize, int64_t count) {
    char* dst = (char*)dest;
    const char* src = (const char*)source;
    size_t n = (size_t)count, size = (size_t)srcsize;
    if (size == 8 && !((size_t)dst & 7) && !((size_t)src & 7)) TILE(int64_t)
    else if (size == 4 && !((size_t)dst & 3) && !((size_t)src & 3)) TILE(int32_t)
    else if (size == 2 && !((size_t)dst & 1) && !((size_t)src & 1)) TILE(int16_t)
    else if (size == 1) memset(dst, *(const signed char*)src, n);
    else while (n--) { memcpy(dst, src, size); dst += size; }
}

#include "apic_natives.inc"

/* apic/c_library/relocatable.py: NATIVES in this order, then _MEMSET_WORDS, then UTILITIES in their order */
static void* const natives[] = {
    (void*)native_memcpy_h2h, (void*)native_memset_host, (void*)native_memtile_host, (void*)native_memset_words,
    (void*)native_radix_sort_int, (void*)native_radix_sort_uint, (void*)native_radix_sort_float,
    (void*)native_radix_sort_double, (void*)native_radix_sort_int64, (void*)native_radix_sort_uint64,
    (void*)native_segmented_sort_int, (void*)native_segmented_sort_float, (void*)native_runlength_encode_int,
    (void*)native_scan_int, (void*)native_scan_int64, (void*)native_scan_float, (void*)native_scan_double,
    (void*)native_sum_float, (void*)native_sum_double, (void*)native_inner_float, (void*)native_inner_double};
#define NATIVE_COUNT ((int64_t)(sizeof natives / sizeof natives[0]))

/* --- open and close --------------------------------------------------------------------------------------- */
static void* aligned_zeroed(int64_t nbytes) {
    void* p = NULL;
    size_t size = nbytes > 0 ? (size_t)nbytes : 1;
    if (posix_memalign(&p, ALIGN, (size + ALIGN - 1) & ~(size_t)(ALIGN - 1))) return NULL;
    memset(p, 0, size);
    return p;
}

int API(abi_version)(void) { return APIC_EXPORT_ABI_VERSION; }

int API(close)(instance_t* g) {
    if (!g) return APIC_OK;
    const apic_image* im = &apic_graph_image;
    if (g->regions)
        for (int64_t r = 0; r < im->nregions; r++) free(g->regions[r]);
    if (g->scalar_values)
        for (int64_t s = 0; s < im->nscalars; s++) free(g->scalar_values[s]);
    free(g->regions);
    free(g->scalar_values);
    free(g->table);
    free(g->arena);
    free(g->loop_counts);
    free(g);
    return APIC_OK;
}

static int target_address(const instance_t* g, int64_t kind, int64_t index, int64_t offset, int64_t* out) {
    const apic_image* im = &apic_graph_image;
    switch (kind) {
    case APIC_TARGET_REGION:
        if (index < 0 || index >= im->nregions || offset < 0 || offset > im->region_sizes[index]) return 0;
        *out = (int64_t)(g->regions[index] + offset);
        return 1;
    case APIC_TARGET_ARENA:
        if (offset < 0 || offset > im->arena_size) return 0;
        *out = (int64_t)(g->arena + offset);
        return 1;
    case APIC_TARGET_KERNEL:
        if (index < 0 || index >= im->nkernels || offset) return 0;
        *out = (int64_t)im->kernels[index];
        return 1;
    case APIC_TARGET_NATIVE:
        if (index < 0 || index >= NATIVE_COUNT || offset) return 0;
        *out = (int64_t)natives[index];
        return 1;
    }
    return 0;
}

int API(open)(int abi_version, instance_t** out) {
    const apic_image* im = &apic_graph_image;
    if (!out) return fail(open_error, APIC_ERROR_ARGUMENT, "open: the output pointer is NULL");
    *out = NULL;
    if (abi_version != APIC_EXPORT_ABI_VERSION || im->abi_version != APIC_EXPORT_ABI_VERSION)
        return fail(open_error, APIC_ERROR_ABI, "open: the caller was built for apic export ABI %d; this library "
                    "is ABI %d (rebuild the caller against this library's header)", abi_version,
                    APIC_EXPORT_ABI_VERSION);
    instance_t* g = (instance_t*)calloc(1, sizeof *g);
    if (!g) return fail(open_error, APIC_ERROR_MEMORY, "open: out of memory");
    g->max_loop_iterations = DEFAULT_MAX_LOOP_ITERATIONS;
    g->regions = (unsigned char**)calloc((size_t)im->nregions + 1, sizeof *g->regions);
    g->scalar_values = (unsigned char**)calloc((size_t)im->nscalars + 1, sizeof *g->scalar_values);
    g->table = (int64_t*)malloc((size_t)(im->rows * APIC_IMAGE_COLUMNS + 1) * sizeof(int64_t));
    g->arena = (unsigned char*)aligned_zeroed(im->arena_size);
    g->loop_counts = (int64_t*)calloc((size_t)im->loops + 1, sizeof(int64_t));
    int ok = g->regions && g->scalar_values && g->table && g->arena && g->loop_counts;
    for (int64_t r = 0; ok && r < im->nregions; r++) {
        ok = (g->regions[r] = (unsigned char*)aligned_zeroed(im->region_sizes[r])) != NULL;
        if (ok && im->region_offsets[r] >= 0)
            memcpy(g->regions[r], im->regions + im->region_offsets[r], (size_t)im->region_sizes[r]);
    }
    for (int64_t s = 0; ok && s < im->nscalars; s++) {
        ok = (g->scalar_values[s] = (unsigned char*)malloc((size_t)im->scalars[s].nbytes + 1)) != NULL;
        if (ok) memcpy(g->scalar_values[s], im->scalars[s].value, (size_t)im->scalars[s].nbytes);
    }
    if (!ok) {
        API(close)(g);
        return fail(open_error, APIC_ERROR_MEMORY, "open: out of memory for the graph's memory");
    }
    memcpy(g->table, im->table, (size_t)(im->rows * APIC_IMAGE_COLUMNS) * sizeof(int64_t));
    memcpy(g->arena, im->arena, (size_t)im->arena_size);
    for (int64_t k = 0; k < im->ntable_relocs; k++) {
        const apic_table_reloc* rel = &im->table_relocs[k];
        int64_t* cell = &g->table[rel->row * APIC_IMAGE_COLUMNS + rel->column];
        if (rel->row < 0 || rel->row >= im->rows || rel->column < 0 || rel->column >= APIC_IMAGE_COLUMNS ||
            !target_address(g, rel->kind, rel->index, *cell, cell)) {
            API(close)(g);
            return fail(open_error, APIC_ERROR_ARGUMENT, "open: the library's op table is corrupt (relocation %lld)",
                        (long long)k);
        }
    }
    for (int64_t k = 0; k < im->narena_relocs; k++) {
        const apic_arena_reloc* rel = &im->arena_relocs[k];
        int64_t word;
        if (rel->offset < 0 || rel->offset + 8 > im->arena_size) word = -1;
        else memcpy(&word, g->arena + rel->offset, 8);
        if (word < 0 || !target_address(g, rel->kind, rel->index, word, &word)) {
            API(close)(g);
            return fail(open_error, APIC_ERROR_ARGUMENT, "open: the library's arena is corrupt (relocation %lld)",
                        (long long)k);
        }
        memcpy(g->arena + rel->offset, &word, 8);
    }
    *out = g;
    return APIC_OK;
}

int API(set_max_loop_iterations)(instance_t* g, int64_t count) {
    if (!g) return APIC_ERROR_ARGUMENT;
    if (count < 0) return fail(g->error, APIC_ERROR_ARGUMENT, "set_max_loop_iterations: %lld is negative",
                               (long long)count);
    g->max_loop_iterations = count;
    return APIC_OK;
}

const char* API(last_error)(const instance_t* g) { return g ? g->error : open_error; }

#include "apic_bindings.inc"
#include "apic_interpreter.inc"
