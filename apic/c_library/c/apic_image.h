/* The saved state of one exported graph, as the generated <name>_graph.c defines it and apic_runtime.c reads
 * it. Internal to the library (its symbols are local to the shared object). */
#ifndef APIC_IMAGE_H
#define APIC_IMAGE_H

#include <stdint.h>

#define APIC_IMAGE_COLUMNS 12 /* int64 per op-table row: opcode, function, ten arguments */
#define APIC_IMAGE_MAX_DIMS 8

/* what a relocation points at */
enum { APIC_TARGET_REGION = 1, APIC_TARGET_ARENA = 2, APIC_TARGET_KERNEL = 3, APIC_TARGET_NATIVE = 4 };

typedef struct apic_table_reloc { int64_t row, column, kind, index; } apic_table_reloc;
typedef struct apic_arena_reloc { int64_t offset, kind, index; } apic_arena_reloc;

typedef struct apic_image_binding {
    const char* name;
    int kind; /* APIC_BINDING_INPUT or APIC_BINDING_OUTPUT */
    const char* dtype;
    int64_t region, offset, nbytes, elem_size;
    int ndim;
    int64_t shape[APIC_IMAGE_MAX_DIMS];
    int64_t strides[APIC_IMAGE_MAX_DIMS]; /* bytes */
} apic_image_binding;

typedef struct apic_image_scalar {
    const char* name;
    const char* dtype;
    int64_t nbytes;
    const unsigned char* value; /* its saved value */
    int64_t noffsets;
    const int64_t* offsets; /* arena byte offsets of its slots */
} apic_image_scalar;

typedef struct apic_image {
    int abi_version;
    int64_t rows;
    const int64_t* table;
    int64_t ntable_relocs;
    const apic_table_reloc* table_relocs;
    int64_t arena_size;
    const unsigned char* arena;
    int64_t narena_relocs;
    const apic_arena_reloc* arena_relocs;
    int64_t nregions;
    const int64_t* region_sizes;
    const int64_t* region_offsets; /* into regions; -1: the region starts zeroed */
    const unsigned char* regions;
    int64_t nkernels;
    void* const* kernels;
    int64_t loops;
    int64_t nbindings;
    const apic_image_binding* bindings;
    int64_t nscalars;
    const apic_image_scalar* scalars;
} apic_image;

#endif
