"""The part of the stand-in CUDA driver library (``benchmarks/cuda_standin.py``) that an exported C library's open,
binding copies and close call (``apic/c_library/c/apic_cuda_runtime.c``): devices, the primary context, modules
(each image kept, so a test can compare it with the saved one), functions (``APIC_STANDIN_KERNELS`` tells their
parameter sizes and layouts by name), memory (real host memory, so copies in and out work), and a dump of the
recorded calls into a file, for a test that ran them in another process. C source, appended to the stand-in's."""

EXPORT_SOURCE = r"""
/* --- what an exported library's open, copies and close call (apic/c_library/c/apic_cuda_runtime.c) ---------
 * Memory is real host memory (cuMemAlloc is calloc), so copies in and out work; handles are counted up. */
#include <stdio.h>
#include <stdlib.h>
enum { CALL_INIT = 13, CALL_DEVICE_GET, CALL_RETAIN, CALL_RELEASE, CALL_LOAD_DATA, CALL_UNLOAD, CALL_GET_FUNCTION,
       CALL_SET_ATTRIBUTE, CALL_ALLOC, CALL_FREE, CALL_HTOD, CALL_DTOH, CALL_MEMSET_D8, CALL_SYNCHRONIZE,
       CALL_DEVICE_ATTRIBUTE, CALL_STREAM_SYNCHRONIZE };
static uint64_t next_handle = 0x5000;

static int keep(int64_t call, int n, const uint64_t *args, const void *data, int64_t size) {
    record_t *r;
    int err = note(call, n, args, &r);
    if (r && size >= 0 && n_bytes + size <= MAX_BYTES) {
        memcpy(bytes + n_bytes, data, (size_t)size);
        n_bytes += size;
        r->nbytes = size;
    }
    return err;
}
static int plain(int64_t call, int n, const uint64_t *args) { return keep(call, n, args, 0, -1); }

int cuInit(unsigned flags) { uint64_t a[1] = {flags}; return plain(CALL_INIT, 1, a); }
int cuDeviceGet(int *device, int ordinal) {
    uint64_t a[1] = {(uint64_t)ordinal};
    int err = plain(CALL_DEVICE_GET, 1, a);
    if (!err && ordinal != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE: one device */
    *device = ordinal;
    return err;
}
/* the compute capability: APIC_STANDIN_ARCH (default 75) */
int cuDeviceGetAttribute(int *value, int attribute, int device) {
    const char *arch = getenv("APIC_STANDIN_ARCH");
    int sm = arch ? atoi(arch) : 75;
    uint64_t a[2] = {(uint64_t)attribute, (uint64_t)device};
    *value = attribute == 75 ? sm / 10 : attribute == 76 ? sm % 10 : 0;
    return plain(CALL_DEVICE_ATTRIBUTE, 2, a);
}
int cuDevicePrimaryCtxRetain(uint64_t *ctx, int device) {
    uint64_t a[2] = {(uint64_t)device, 0x100};
    *ctx = 0x100;
    return plain(CALL_RETAIN, 2, a);
}
int cuDevicePrimaryCtxRelease_v2(int device) { uint64_t a[1] = {(uint64_t)device}; return plain(CALL_RELEASE, 1, a); }
int cuModuleLoadData(uint64_t *module, const unsigned char *image) {
    int64_t size = (int64_t)strlen((const char *)image) + 1; /* PTX: a C string */
    if (!memcmp(image, "\177ELF", 4)) { /* a CUBIN (ELF64): it ends where the last table or section ends */
        uint64_t shoff, phoff, at, n, end;
        uint16_t shsize, shnum, phsize, phnum;
        uint32_t type;
        memcpy(&phoff, image + 0x20, 8); memcpy(&shoff, image + 0x28, 8); memcpy(&phsize, image + 0x36, 2);
        memcpy(&phnum, image + 0x38, 2); memcpy(&shsize, image + 0x3A, 2); memcpy(&shnum, image + 0x3C, 2);
        size = (int64_t)(shoff + (uint64_t)shsize * shnum);
        if ((int64_t)(phoff + (uint64_t)phsize * phnum) > size) size = (int64_t)(phoff + (uint64_t)phsize * phnum);
        for (uint16_t k = 0; k < shnum; k++) { /* sections: offset +0x18, size +0x20; NOBITS (8) has no bytes */
            memcpy(&type, image + shoff + (uint64_t)k * shsize + 4, 4);
            memcpy(&at, image + shoff + (uint64_t)k * shsize + 0x18, 8);
            memcpy(&n, image + shoff + (uint64_t)k * shsize + 0x20, 8);
            end = at + n;
            if (type != 8 && (int64_t)end > size) size = (int64_t)end;
        }
        for (uint16_t k = 0; k < phnum; k++) { /* segments: offset +0x08, file size +0x20 */
            memcpy(&at, image + phoff + (uint64_t)k * phsize + 0x08, 8);
            memcpy(&n, image + phoff + (uint64_t)k * phsize + 0x20, 8);
            if ((int64_t)(at + n) > size) size = (int64_t)(at + n);
        }
    }
    *module = next_handle += 0x10;
    uint64_t a[1] = {*module};
    return keep(CALL_LOAD_DATA, 1, a, image, size);
}
int cuModuleUnload(uint64_t module) { uint64_t a[1] = {module}; return plain(CALL_UNLOAD, 1, a); }
/* APIC_STANDIN_KERNELS="name=8,8,4;other=8": the parameter sizes of kernels got by name (as standin_kernel);
 * "name=0:8,8:8,16:4" gives their offsets too, which cuFuncGetParamInfo then reports */
static struct { uint64_t fn; int64_t count; int64_t offsets[MAX_PARAMS], sizes[MAX_PARAMS]; } layouts[MAX_KERNELS];
static int64_t n_layouts;
static void export_reset(void) { next_handle = 0x5000; n_layouts = 0; }
static void register_named(const char *name, uint64_t fn) {
    const char *spec = getenv("APIC_STANDIN_KERNELS");
    size_t length = strlen(name);
    while (spec && *spec) {
        const char *end = strchr(spec, ';');
        if (!end) end = spec + strlen(spec);
        if (!strncmp(spec, name, length) && spec[length] == '=') {
            int64_t sizes[MAX_PARAMS], offsets[MAX_PARAMS], count = 0, placed = 0;
            for (const char *p = spec + length + 1; p < end && count < MAX_PARAMS; p++) {
                int64_t value = strtoll(p, (char **)&p, 10);
                if (*p == ':') {
                    offsets[count] = value;
                    placed = 1;
                    value = strtoll(p + 1, (char **)&p, 10);
                }
                sizes[count++] = value;
                if (*p != ',') break;
            }
            standin_kernel(fn, count, sizes);
            if (placed && n_layouts < MAX_KERNELS) {
                layouts[n_layouts].fn = fn;
                layouts[n_layouts].count = count;
                memcpy(layouts[n_layouts].offsets, offsets, 8 * (size_t)count);
                memcpy(layouts[n_layouts++].sizes, sizes, 8 * (size_t)count);
            }
            return;
        }
        spec = *end ? end + 1 : end;
    }
}
int cuModuleGetFunction(uint64_t *fn, uint64_t module, const char *name) {
    *fn = next_handle += 0x10;
    register_named(name, *fn);
    uint64_t a[2] = {module, *fn};
    return keep(CALL_GET_FUNCTION, 2, a, name, (int64_t)strlen(name));
}
/* the layout APIC_STANDIN_KERNELS gave with offsets; CUDA_ERROR_INVALID_VALUE past it or without one */
int cuFuncGetParamInfo(uint64_t fn, size_t index, size_t *offset, size_t *size) {
    for (int64_t k = 0; k < n_layouts; k++)
        if (layouts[k].fn == fn) {
            if ((int64_t)index >= layouts[k].count) return 1;
            *offset = (size_t)layouts[k].offsets[index];
            *size = (size_t)layouts[k].sizes[index];
            return 0;
        }
    return 1;
}
int cuFuncSetAttribute(uint64_t fn, int attribute, int value) {
    uint64_t a[3] = {fn, (uint64_t)attribute, (uint64_t)value};
    return plain(CALL_SET_ATTRIBUTE, 3, a);
}
int cuMemAlloc_v2(uint64_t *pointer, size_t size) {
    void *p = calloc(1, size);
    if (!p) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    uint64_t a[2] = {size, (uint64_t)p};
    int err = plain(CALL_ALLOC, 2, a);
    if (err) { free(p); return err; }
    *pointer = (uint64_t)p;
    return 0;
}
int cuMemFree_v2(uint64_t pointer) {
    uint64_t a[1] = {pointer};
    int err = plain(CALL_FREE, 1, a);
    if (!err) free((void *)pointer);
    return err;
}
int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n) {
    uint64_t a[2] = {dst, n};
    int err = keep(CALL_HTOD, 2, a, src, (int64_t)n);
    if (!err) memcpy((void *)dst, src, n);
    return err;
}
int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) {
    uint64_t a[2] = {src, n};
    int err = plain(CALL_DTOH, 2, a);
    if (!err) memcpy(dst, (const void *)src, n);
    return err;
}
int cuMemsetD8_v2(uint64_t dst, unsigned char value, size_t n) {
    uint64_t a[3] = {dst, value, n};
    int err = plain(CALL_MEMSET_D8, 3, a);
    if (!err) memset((void *)dst, value, n);
    return err;
}
int cuCtxSynchronize(void) { return plain(CALL_SYNCHRONIZE, 0, 0); }
int cuStreamSynchronize(void *stream) {
    uint64_t a[1] = {(uint64_t)stream};
    return plain(CALL_STREAM_SYNCHRONIZE, 1, a);
}
int cuGetErrorName(int code, const char **name) {
    static const struct { int code; const char *name; } names[] = {
        {1, "CUDA_ERROR_INVALID_VALUE"}, {2, "CUDA_ERROR_OUT_OF_MEMORY"}, {100, "CUDA_ERROR_NO_DEVICE"},
        {101, "CUDA_ERROR_INVALID_DEVICE"}, {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"}, {218, "CUDA_ERROR_INVALID_PTX"},
        {700, "CUDA_ERROR_ILLEGAL_ADDRESS"}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (names[k].code == code) return *name = names[k].name, 0;
    return 1;
}
/* the recorded calls into a file, for a test that ran them in another process (StandIn.read_dump) */
int standin_dump(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    int64_t head[2] = {n_records, n_bytes};
    int bad = fwrite(head, 8, 2, f) != 2;
    bad |= fwrite(records, sizeof(record_t), (size_t)n_records, f) != (size_t)n_records;
    bad |= fwrite(bytes, 1, (size_t)n_bytes, f) != (size_t)n_bytes;
    return fclose(f) || bad;
}

"""
