/* Instances of one exported graph replayed from several threads at once: each ends as a lone instance replayed
 * as often, byte for byte. Usage: threads BINDING REPLAYS. Exit status 0 if every thread's result matches. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include GRAPH_HEADER

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define F(x) CAT(GRAPH, x)
#define THREADS 4

static const char* binding;
static long long replays;

typedef struct { F(instance) * g; int status; } job_t;

static void* work(void* arg) {
    job_t* job = (job_t*)arg;
    for (long long k = 0; k < replays && !job->status; k++) job->status = F(replay)(job->g, 1);
    return NULL;
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    binding = argv[1];
    replays = atoll(argv[2]);
    F(instance)* lone = NULL;
    apic_binding_info info;
    if (F(open)(APIC_EXPORT_ABI_VERSION, &lone) || F(find)(lone, binding, &info) || F(replay)(lone, replays)) return 1;
    char* expected = malloc(info.nbytes);
    char* got = malloc(info.nbytes);
    F(read)(lone, binding, expected, info.nbytes);
    job_t jobs[THREADS];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t].status = F(open)(APIC_EXPORT_ABI_VERSION, &jobs[t].g);
        if (jobs[t].status) return 1;
    }
    for (int t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, work, &jobs[t]);
    int failures = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        F(read)(jobs[t].g, binding, got, info.nbytes);
        if (jobs[t].status || memcmp(got, expected, info.nbytes)) {
            printf("thread %d: status %d, %s\n", t, jobs[t].status, memcmp(got, expected, info.nbytes) ? "differs" : "same");
            failures++;
        }
        F(close)(jobs[t].g);
    }
    F(close)(lone);
    printf("%d failures\n", failures);
    return failures != 0;
}
