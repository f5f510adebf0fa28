/* A program that runs an exported graph with no Python: built by the tests against lib<GRAPH>.so.
 *
 *   runner STEP...   where STEP is  w:NAME=FILE  (write FILE's bytes into a binding or scalar parameter),
 *                                   r:N         (replay N times),  d:DIR  (write every binding to DIR/NAME.bin),
 *                                   x:N         (replay N times, expecting an error: print it, go on),
 *                                   c:N         (cap each loop at N iterations),
 *                                   m           (fail if a Python, NumPy, Numba or Warp library is mapped)
 * Exit status: 0 done; 1 a call failed (its error on stderr); 3 a Python library is loaded; 4 x: did not fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include GRAPH_HEADER

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define F(x) CAT(GRAPH, x)

static int check(int status, const F(instance) * g, const char* what) {
    if (status != APIC_OK) {
        fprintf(stderr, "%s: status %d: %s\n", what, status, F(last_error)(g));
        exit(1);
    }
    return status;
}

static int python_mapped(void) {
    FILE* maps = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    if (!maps) return 1;
    while (fgets(line, sizeof line, maps))
        if (strstr(line, "libpython") || strstr(line, "numba") || strstr(line, "/warp/") || strstr(line, "numpy") ||
            strstr(line, "warp.so")) {
            fprintf(stderr, "mapped: %s", line);
            found = 1;
        }
    fclose(maps);
    return found;
}

int main(int argc, char** argv) {
    F(instance)* g = NULL;
    check(F(open)(APIC_EXPORT_ABI_VERSION, &g), NULL, "open");
    for (int a = 1; a < argc; a++) {
        char* step = argv[a];
        if (!strncmp(step, "w:", 2)) {
            char* eq = strchr(step, '=');
            *eq = 0;
            FILE* f = fopen(eq + 1, "rb");
            if (!f) return 2;
            fseek(f, 0, SEEK_END);
            long n = ftell(f);
            fseek(f, 0, SEEK_SET);
            char* data = malloc(n + 1);
            if (fread(data, 1, n, f) != (size_t)n) return 2;
            fclose(f);
            check(F(write)(g, step + 2, data, (size_t)n), g, "write");
            free(data);
        } else if (!strncmp(step, "r:", 2)) {
            check(F(replay)(g, atoll(step + 2)), g, "replay");
        } else if (!strncmp(step, "d:", 2)) {
            int count = 0;
            check(F(binding_count)(g, &count), g, "binding_count");
            for (int k = 0; k < count; k++) {
                apic_binding_info info;
                check(F(binding_at)(g, k, &info), g, "binding_at");
                char* data = malloc(info.nbytes + 1);
                check(F(read)(g, info.name, data, info.nbytes), g, "read");
                char path[4096];
                snprintf(path, sizeof path, "%s/%s.bin", step + 2, info.name);
                FILE* f = fopen(path, "wb");
                if (!f || fwrite(data, 1, info.nbytes, f) != info.nbytes) return 2;
                fclose(f);
                free(data);
            }
        } else if (!strncmp(step, "x:", 2)) {
            int status = F(replay)(g, atoll(step + 2));
            if (status == APIC_OK) return 4;
            printf("status %d: %s\n", status, F(last_error)(g));
        } else if (!strncmp(step, "c:", 2)) {
            check(F(set_max_loop_iterations)(g, atoll(step + 2)), g, "set_max_loop_iterations");
        } else if (!strcmp(step, "m")) {
            if (python_mapped()) return 3;
        } else {
            return 2;
        }
    }
    check(F(close)(g), NULL, "close");
    return 0;
}
