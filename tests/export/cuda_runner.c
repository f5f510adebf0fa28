/* A program that runs an exported CUDA graph with no Python: built by the tests against lib<GRAPH>.so.
 *
 *   cuda_runner DRIVER STEP...   DRIVER: the CUDA driver library's path, or - (open's default: APIC_CUDA_DRIVER,
 *                                else libcuda.so.1). STEP is one of
 *     o:DEVICE      open the graph on DEVICE (status and error on stderr, exit 2, if it fails)
 *     O:DEVICE      the same, expecting an error (printed)
 *     w:NAME=FILE   write FILE's bytes into a binding        d:DIR        write every binding to DIR/NAME.bin
 *     r:N:STREAM    replay N times on STREAM (a number)       x:N:STREAM   the same, expecting an error (printed)
 *     e:NAME        find NAME, expecting an error (printed)   p:NAME       print the binding's device address
 *     f:AT:CODE     make the stand-in driver's call AT fail   l:FILE       the stand-in's recorded calls to FILE
 *     m:N           cap the loops at N iterations per replay   c            close
 * Exit status: 0 done; 1 a call failed (its error on stderr); 2 open failed; 4 an O:, x: or e: step did not fail. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include GRAPH_HEADER

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define F(x) CAT(GRAPH, x)

static void check(int status, const F(instance) * g, const char* what) {
    if (status != APIC_OK) {
        fprintf(stderr, "%s: status %d: %s\n", what, status, F(last_error)(g));
        exit(1);
    }
}

static void* standin(const char* driver, const char* symbol) {
    void* lib = dlopen(driver, RTLD_NOW | RTLD_NOLOAD);
    void* found = lib ? dlsym(lib, symbol) : NULL;
    if (!found) {
        fprintf(stderr, "%s: not in a loaded %s\n", symbol, driver);
        exit(1);
    }
    return found;
}

int main(int argc, char** argv) {
    const char* driver = argc > 1 && strcmp(argv[1], "-") ? argv[1] : NULL;
    F(instance)* g = NULL;
    if (driver) dlopen(driver, RTLD_NOW); /* kept loaded, so that f: and l: reach the stand-in after a close */
    for (int k = 2; k < argc; k++) {
        char* arg = argv[k];
        char* value = arg + 2;
        if (arg[0] == 'o' || arg[0] == 'O') {
            int status = F(open)(APIC_EXPORT_ABI_VERSION, driver, atoi(value), &g);
            if (arg[0] == 'O') {
                if (status == APIC_OK) return 4;
                printf("open: status %d: %s\n", status, F(last_error)(NULL));
            } else if (status != APIC_OK) {
                fprintf(stderr, "open: status %d: %s\n", status, F(last_error)(NULL));
                return 2;
            }
        } else if (arg[0] == 'w') {
            char* eq = strchr(value, '=');
            *eq = 0;
            FILE* f = fopen(eq + 1, "rb");
            fseek(f, 0, SEEK_END);
            long size = ftell(f);
            fseek(f, 0, SEEK_SET);
            char* data = malloc(size + 1);
            if (fread(data, 1, size, f) != (size_t)size) return 1;
            fclose(f);
            check(F(write)(g, value, data, size), g, "write");
            free(data);
        } else if (arg[0] == 'r' || arg[0] == 'x') {
            char* rest = NULL;
            long long n = strtoll(value, &rest, 10);
            void* stream = (void*)(uintptr_t)strtoull(rest + 1, NULL, 0);
            int status = F(replay)(g, stream, n);
            if (arg[0] == 'r') check(status, g, "replay");
            else if (status == APIC_OK) return 4;
            else printf("replay: status %d: %s\n", status, F(last_error)(g));
        } else if (arg[0] == 'e') {
            apic_binding_info info;
            int status = F(find)(g, value, &info);
            if (status == APIC_OK) return 4;
            printf("find: status %d: %s\n", status, F(last_error)(g));
        } else if (arg[0] == 'p') {
            void* pointer = NULL;
            check(F(pointer)(g, value, &pointer), g, "pointer");
            printf("pointer %s %llu\n", value, (unsigned long long)(uintptr_t)pointer);
        } else if (arg[0] == 'd') {
            int count = 0;
            check(F(binding_count)(g, &count), g, "binding_count");
            for (int b = 0; b < count; b++) {
                apic_binding_info info;
                check(F(binding_at)(g, b, &info), g, "binding_at");
                char* data = malloc(info.nbytes + 1);
                check(F(read)(g, info.name, data, info.nbytes), g, "read");
                char path[4096];
                snprintf(path, sizeof path, "%s/%s.bin", value, info.name);
                FILE* f = fopen(path, "wb");
                fwrite(data, 1, info.nbytes, f);
                fclose(f);
                free(data);
            }
        } else if (arg[0] == 'f') {
            char* rest = NULL;
            long long at = strtoll(value, &rest, 10);
            ((void (*)(long long, long long))standin(driver, "standin_fail"))(at, strtoll(rest + 1, NULL, 10));
        } else if (arg[0] == 'l') {
            if (((int (*)(const char*))standin(driver, "standin_dump"))(value)) return 1;
        } else if (arg[0] == 'm') {
            check(F(set_max_loop_iterations)(g, atoll(value)), g, "set_max_loop_iterations");
        } else if (arg[0] == 'c') {
            check(F(close)(g), NULL, "close");
            g = NULL;
        } else {
            fprintf(stderr, "unknown step %s\n", arg);
            return 1;
        }
    }
    return 0;
}
