// SPDX-License-Identifier: BSL-1.0
/*
 * nng_pingpong.c - transport floor for a C++ Fiber-like library.
 *
 * Build:  gcc -O2 -o nng_pingpong nng_pingpong.c -lnng
 * Run:    ./nng_pingpong [roundtrips=100000] [n_small=200000] [n_big=2000] [reps=3]
 *
 * Every test uses two processes: the driver (this process) and a server
 * started with popen() as "<self> serve ...", which prints READY after it
 * listens, so the driver never forks while nng threads are running.
 *
 *  - REQ/REP and PAIR1 ping-pong: 64-byte messages, one nng_msg allocated per
 *    request; every round trip (RTT) is timed with CLOCK_MONOTONIC; prints
 *    median / p99 / mean RTT in microseconds (after 1000 warm-up trips).
 *  - PUSH/PULL: sender pushes 1 sync message + N messages of the given size
 *    (nng_msg_alloc per message, body not written, as in nng's perf/perf.c);
 *    the PULL side times first-sync-to-last-message and reports msgs/s.
 *    Median of `reps` runs.
 *
 * Placement: env PIN=same puts every process (and nng thread) on CPU 0;
 * PIN=split puts the driver on CPU 0 and the server/echo process on CPU 1;
 * unset = let the scheduler decide (the default numbers).
 */
#define _GNU_SOURCE
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WARMUP 1000

/* role 0 = driver, 1 = server; see PIN in the header comment */
static void pin(int role)
{
	const char *p = getenv("PIN");
	if (!p) return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET((!strcmp(p, "split") && role == 1) ? 1 : 0, &set);
	if (sched_setaffinity(0, sizeof set, &set)) perror("sched_setaffinity");
}

static void die(const char *what, int rv)
{
	fprintf(stderr, "%s: %s\n", what, nng_strerror(rv));
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;
	return (x > y) - (x < y);
}

static int open_proto(const char *p, nng_socket *s)
{
	if (!strcmp(p, "rep")) return nng_rep0_open(s);
	if (!strcmp(p, "req")) return nng_req0_open(s);
	if (!strcmp(p, "pair")) return nng_pair1_open(s);
	if (!strcmp(p, "pull")) return nng_pull0_open(s);
	if (!strcmp(p, "push")) return nng_push0_open(s);
	return NNG_ENOTSUP;
}

/* ---------------- server side (child) ---------------- */
static int serve(int argc, char **argv)
{
	/* serve <rep|pair|pull> <url> <count> [msgsize] */
	if (argc < 5) return 2;
	const char *proto = argv[2], *url = argv[3];
	long count = atol(argv[4]);
	nng_socket s;
	nng_msg *m;
	int rv;
	if ((rv = open_proto(proto, &s)) != 0) die("open", rv);
	nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 0); /* no size limit */
	nng_socket_set_int(s, NNG_OPT_RECVBUF, 128);   /* may be unsupported */
	if ((rv = nng_listen(s, url, NULL, 0)) != 0) die("listen", rv);
	printf("READY\n");
	fflush(stdout);
	if (!strcmp(proto, "pull")) {
		if ((rv = nng_recvmsg(s, &m, 0)) != 0) die("recv sync", rv);
		nng_msg_free(m);
		double t0 = now_s();
		for (long i = 0; i < count; i++) {
			if ((rv = nng_recvmsg(s, &m, 0)) != 0) die("recv", rv);
			nng_msg_free(m);
		}
		double t1 = now_s();
		printf("RESULT %.9f\n", t1 - t0);
	} else { /* echo */
		for (long i = 0; i < count; i++) {
			if ((rv = nng_recvmsg(s, &m, 0)) != 0) die("recv", rv);
			if ((rv = nng_sendmsg(s, m, 0)) != 0) die("send", rv);
		}
		nng_msleep(100); /* let the last reply drain */
		printf("RESULT 0\n");
	}
	fflush(stdout);
	nng_close(s);
	return 0;
}

/* ---------------- driver side ---------------- */
static FILE *start_server(const char *proto, const char *url, long count)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "/proc/%d/exe serve %s %s %ld", (int) getpid(),
	    proto, url, count);
	FILE *f = popen(cmd, "r");
	char line[128];
	if (!f || !fgets(line, sizeof line, f) || strncmp(line, "READY", 5)) {
		fprintf(stderr, "server did not start: %s\n", cmd);
		exit(1);
	}
	return f;
}

static double finish_server(FILE *f)
{
	char line[128];
	double v = -1;
	if (fgets(line, sizeof line, f)) sscanf(line, "RESULT %lf", &v);
	pclose(f);
	return v;
}

static void pingpong(const char *proto, const char *url, long trips)
{
	long total = trips + WARMUP;
	FILE *srv = start_server(!strcmp(proto, "req") ? "rep" : "pair", url, total);
	nng_socket s;
	int rv;
	if ((rv = open_proto(proto, &s)) != 0) die("open", rv);
	if ((rv = nng_dial(s, url, NULL, 0)) != 0) die("dial", rv);
	double *rtt = malloc(sizeof(double) * trips);
	for (long i = 0; i < total; i++) {
		nng_msg *m;
		double t0 = now_s();
		if ((rv = nng_msg_alloc(&m, 64)) != 0) die("alloc", rv);
		memset(nng_msg_body(m), (int) i, 64);
		if ((rv = nng_sendmsg(s, m, 0)) != 0) die("send", rv);
		if ((rv = nng_recvmsg(s, &m, 0)) != 0) die("recv", rv);
		nng_msg_free(m);
		double t1 = now_s();
		if (i >= WARMUP) rtt[i - WARMUP] = (t1 - t0) * 1e6;
	}
	nng_close(s);
	finish_server(srv);
	double sum = 0;
	for (long i = 0; i < trips; i++) sum += rtt[i];
	qsort(rtt, trips, sizeof(double), cmpd);
	printf("%-9s %-6s 64B RTT us: median %7.1f  p99 %7.1f  mean %7.1f  (n=%ld)\n",
	    !strcmp(proto, "req") ? "REQ/REP" : "PAIR1", url[0] == 'i' ? "ipc" : "tcp",
	    rtt[trips / 2], rtt[(long) (trips * 0.99)], sum / trips, trips);
	fflush(stdout);
	free(rtt);
}

static double push_once(const char *url, size_t size, long count)
{
	FILE *srv = start_server("pull", url, count);
	nng_socket s;
	nng_msg *m;
	int rv;
	if ((rv = nng_push0_open(&s)) != 0) die("open", rv);
	nng_socket_set_int(s, NNG_OPT_SENDBUF, 128); /* may be unsupported */
	if ((rv = nng_dial(s, url, NULL, 0)) != 0) die("dial", rv);
	if ((rv = nng_msg_alloc(&m, 0)) != 0) die("alloc", rv);
	if ((rv = nng_sendmsg(s, m, 0)) != 0) die("send", rv);
	for (long i = 0; i < count; i++) {
		if ((rv = nng_msg_alloc(&m, size)) != 0) die("alloc", rv);
		if ((rv = nng_sendmsg(s, m, 0)) != 0) die("send", rv);
	}
	double secs = finish_server(srv); /* blocks until PULL got everything */
	nng_close(s);
	return secs;
}

static void pushpull(const char *url, size_t size, long count, int reps)
{
	double r[16];
	for (int k = 0; k < reps; k++) r[k] = count / push_once(url, size, count);
	qsort(r, reps, sizeof(double), cmpd);
	double med = r[reps / 2];
	printf("PUSH/PULL %-6s %7zuB: median %10.0f msg/s  %8.1f MiB/s  (n=%ld, runs:",
	    url[0] == 'i' ? "ipc" : "tcp", size, med, med * size / 1048576.0, count);
	for (int k = 0; k < reps; k++) printf(" %.0f", r[k]);
	printf(")\n");
	fflush(stdout);
}

/* Baseline without nng: 64-byte ping-pong over an AF_UNIX socketpair with a
 * forked echo child (run before nng starts any thread). */
static void raw_unix(long trips)
{
	int sv[2];
	char buf[64];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) exit(1);
	long total = trips + WARMUP;
	pid_t pid = fork();
	if (pid == 0) {
		pin(1);
		close(sv[0]);
		for (long i = 0; i < total; i++) {
			size_t got = 0;
			while (got < 64) {
				ssize_t r = read(sv[1], buf + got, 64 - got);
				if (r <= 0) _exit(1);
				got += r;
			}
			if (write(sv[1], buf, 64) != 64) _exit(1);
		}
		_exit(0);
	}
	close(sv[1]);
	double *rtt = malloc(sizeof(double) * trips);
	memset(buf, 1, sizeof buf);
	for (long i = 0; i < total; i++) {
		double t0 = now_s();
		if (write(sv[0], buf, 64) != 64) exit(1);
		size_t got = 0;
		while (got < 64) {
			ssize_t r = read(sv[0], buf + got, 64 - got);
			if (r <= 0) exit(1);
			got += r;
		}
		double t1 = now_s();
		if (i >= WARMUP) rtt[i - WARMUP] = (t1 - t0) * 1e6;
	}
	waitpid(pid, NULL, 0);
	close(sv[0]);
	double sum = 0;
	for (long i = 0; i < trips; i++) sum += rtt[i];
	qsort(rtt, trips, sizeof(double), cmpd);
	printf("raw AF_UNIX socketpair 64B RTT us: median %7.1f  p99 %7.1f  mean %7.1f  (n=%ld, no nng)\n",
	    rtt[trips / 2], rtt[(long) (trips * 0.99)], sum / trips, trips);
	fflush(stdout);
	free(rtt);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "serve")) {
		pin(1);
		return serve(argc, argv);
	}
	pin(0);
	long trips = argc > 1 ? atol(argv[1]) : 100000;
	long n_small = argc > 2 ? atol(argv[2]) : 200000;
	long n_big = argc > 3 ? atol(argv[3]) : 2000;
	int reps = argc > 4 ? atoi(argv[4]) : 3;
	if (reps < 1 || reps > 16) reps = 3;
	char ipc[128], tcp[64];
	snprintf(ipc, sizeof ipc, "ipc:///tmp/nng_pingpong_%d.ipc", (int) getpid());
	snprintf(tcp, sizeof tcp, "tcp://127.0.0.1:%d", 20000 + (int) getpid() % 20000);
	raw_unix(trips);
	printf("nng %s  PIN=%s\n", nng_version(), getenv("PIN") ? getenv("PIN") : "(unset)");
	pingpong("req", ipc, trips);
	pingpong("req", tcp, trips);
	pingpong("pair", ipc, trips);
	pingpong("pair", tcp, trips);
	pushpull(ipc, 64, n_small, reps);
	pushpull(tcp, 64, n_small, reps);
	pushpull(ipc, 1 << 20, n_big, reps);
	pushpull(tcp, 1 << 20, n_big, reps);
	unlink(ipc + 6);
	return 0;
}
