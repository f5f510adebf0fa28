/* A careless or hostile caller of an exported graph: every call returns an error status and a message, none
 * crashes. Prints one line per check ("ok NAME" or "FAIL NAME ..."); exit status 0 if every check held.
 * Built against any export with at least one array binding (and, where the graph has one, a scalar). */
#include <stdio.h>
#include <string.h>

#include GRAPH_HEADER

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define F(x) CAT(GRAPH, x)

static int failures = 0;

static void expect(const char* what, int got, int want, const char* message) {
    if (got == want && message && message[0]) {
        printf("ok %s: %s\n", what, message);
    } else {
        printf("FAIL %s: status %d (expected %d), message '%s'\n", what, got, want, message ? message : "(null)");
        failures++;
    }
}

int main(void) {
    F(instance)* g = NULL;
    F(instance)* h = NULL;
    apic_binding_info info, array, scalar;
    char buffer[64];
    void* p = NULL;
    int count = 0, has_scalar = 0;

    expect("abi_version", F(abi_version)() == APIC_EXPORT_ABI_VERSION, 1, "the header's");
    expect("open wrong ABI", F(open)(APIC_EXPORT_ABI_VERSION + 1, &g), APIC_ERROR_ABI, F(last_error)(NULL));
    expect("open wrong ABI leaves NULL", g == NULL, 1, "NULL");
    expect("open NULL out", F(open)(APIC_EXPORT_ABI_VERSION, NULL), APIC_ERROR_ARGUMENT, F(last_error)(NULL));
    if (F(open)(APIC_EXPORT_ABI_VERSION, &g) != APIC_OK || F(open)(APIC_EXPORT_ABI_VERSION, &h) != APIC_OK) {
        printf("FAIL open: %s\n", F(last_error)(NULL));
        return 1;
    }
    F(binding_count)(g, &count);
    F(binding_at)(g, 0, &array);
    for (int k = 0; k < count; k++) {
        F(binding_at)(g, k, &info);
        if (info.kind == APIC_BINDING_SCALAR) scalar = info, has_scalar = 1;
    }
    expect("find unknown", F(find)(g, "no such binding", &info), APIC_ERROR_NOT_FOUND, F(last_error)(g));
    expect("find NULL name", F(find)(g, NULL, &info), APIC_ERROR_ARGUMENT, F(last_error)(g));
    expect("find NULL info", F(find)(g, array.name, NULL), APIC_ERROR_ARGUMENT, F(last_error)(g));
    expect("binding_at -1", F(binding_at)(g, -1, &info), APIC_ERROR_ARGUMENT, F(last_error)(g));
    expect("binding_at count", F(binding_at)(g, count, &info), APIC_ERROR_ARGUMENT, F(last_error)(g));
    expect("write unknown", F(write)(g, "nope", buffer, 4), APIC_ERROR_NOT_FOUND, F(last_error)(g));
    expect("write short", F(write)(g, array.name, buffer, array.nbytes - 1), APIC_ERROR_SIZE, F(last_error)(g));
    expect("write long", F(write)(g, array.name, buffer, array.nbytes + 1), APIC_ERROR_SIZE, F(last_error)(g));
    expect("write huge", F(write)(g, array.name, buffer, (size_t)-1), APIC_ERROR_SIZE, F(last_error)(g));
    expect("write NULL data", F(write)(g, array.name, NULL, array.nbytes), APIC_ERROR_ARGUMENT, F(last_error)(g));
    expect("read short", F(read)(g, array.name, buffer, 1), APIC_ERROR_SIZE, F(last_error)(g));
    expect("read NULL data", F(read)(g, array.name, NULL, array.nbytes), APIC_ERROR_ARGUMENT, F(last_error)(g));
    expect("pointer NULL out", F(pointer)(g, array.name, NULL), APIC_ERROR_ARGUMENT, F(last_error)(g));
    expect("pointer unknown", F(pointer)(g, "nope", &p), APIC_ERROR_NOT_FOUND, F(last_error)(g));
    if (has_scalar) {
        expect("pointer to a scalar", F(pointer)(g, scalar.name, &p), APIC_ERROR_KIND, F(last_error)(g));
        expect("scalar wrong size", F(write)(g, scalar.name, buffer, scalar.nbytes + 1), APIC_ERROR_SIZE,
               F(last_error)(g));
    }
    expect("replay negative", F(replay)(g, -1), APIC_ERROR_ARGUMENT, F(last_error)(g));
    expect("loop cap negative", F(set_max_loop_iterations)(g, -1), APIC_ERROR_ARGUMENT, F(last_error)(g));
    expect("replay NULL", F(replay)(NULL, 1), APIC_ERROR_ARGUMENT, "NULL instance");
    expect("close NULL", F(close)(NULL), APIC_OK, "nothing");
    /* an error on one instance is not another's */
    expect("other instance's error untouched", F(last_error)(h)[0] == 0, 1, "empty");
    /* the pointer is the instance's memory: what is written through it is read back, in that instance only */
    expect("pointer", F(pointer)(g, array.name, &p), APIC_OK, "given");
    memset(p, 0x5a, array.nbytes);
    {
        unsigned char a[4096], b[4096];
        size_t n = array.nbytes < sizeof a ? array.nbytes : sizeof a;
        if (array.nbytes <= sizeof a) {
            F(read)(g, array.name, a, array.nbytes);
            F(read)(h, array.name, b, array.nbytes);
            expect("pointer writes its instance", a[0] == 0x5a && a[n - 1] == 0x5a, 1, "0x5a");
            expect("other instance unchanged", memcmp(a, b, n) != 0, 1, "differs");
        }
    }
    expect("replay after errors", F(replay)(g, 2), APIC_OK, "fine");
    F(close)(g);
    F(close)(h);
    printf("%d failures\n", failures);
    return failures != 0;
}
