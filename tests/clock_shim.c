/* A host whose clock is off: LD_PRELOAD this into a process and set CLOCK_SKEW_MS.
 *
 * Every wall-clock read the process makes (clock_gettime of CLOCK_REALTIME and its
 * coarse/TAI kin, gettimeofday, time) returns the real time plus CLOCK_SKEW_MS; the
 * monotonic clocks are untouched, as on a host whose NTP is wrong. Python's time.time()
 * reads clock_gettime(CLOCK_REALTIME), so the whole interpreter, the WAL and its file
 * log see the skewed time, exactly as a separate machine would. Built by
 * tests/wal/test_clocks.py with gcc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long long skew_ns(void) {
    static int read;
    static long long ns;
    if (!read) {
        const char *s = getenv("CLOCK_SKEW_MS");
        ns = s ? atoll(s) * 1000000LL : 0;
        read = 1;
    }
    return ns;
}

static void shift(struct timespec *ts) {
    long long t = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + skew_ns();
    ts->tv_sec = (time_t)(t / 1000000000LL);
    ts->tv_nsec = (long)(t % 1000000000LL);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000L;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI))
        shift(ts);
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    if (tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
