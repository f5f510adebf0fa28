/* Step the exported demo scene (a mass-spring chain falling onto the ground) with no Python: 120 frames,
 * printing the height of the free end every 20. Build: examples/c/README.md. */
#include <stdio.h>

#include "chain.h"

#define PARTICLES 32

int main(void) {
    chain_instance* g = NULL;
    if (chain_open(APIC_EXPORT_ABI_VERSION, &g) != APIC_OK) {
        fprintf(stderr, "open: %s\n", chain_last_error(NULL));
        return 1;
    }
    apic_binding_info info;
    if (chain_find(g, "x", &info) != APIC_OK || info.nbytes != sizeof(float) * 3 * PARTICLES) {
        fprintf(stderr, "find: %s\n", chain_last_error(g));
        chain_close(g);
        return 1;
    }
    float x[PARTICLES][3];
    for (int frame = 1; frame <= 120; frame++) {
        if (chain_replay(g, 1) != APIC_OK) { /* one frame: 8 substeps of 6 ops, and a copy */
            fprintf(stderr, "replay: %s\n", chain_last_error(g));
            break;
        }
        if (frame % 20 == 0 && chain_read(g, "x", x, sizeof x) == APIC_OK)
            printf("frame %3d: free end at height %.4f\n", frame, x[PARTICLES - 1][1]);
    }
    chain_close(g);
    return 0;
}
