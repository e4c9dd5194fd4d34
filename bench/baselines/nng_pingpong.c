// SPDX-License-Identifier: BSL-1.0
/*
 * nng_pingpong.c - transport floor for a C++ Fiber-like library.
 *
 * Build:  gcc -O2 -o nng_pingpong nng_pingpong.c -lnng
 * Run:    ./nng_pingpong [options] [roundtrips=100000] [n_small=200000] [n_big=2000] [reps=3]
 *
 * Options (all optional; without them: ipc:// and tcp://127.0.0.1, every test):
 *   --url URL          test this one URL instead: tcp://ADDR:PORT, tls+tcp://ADDR:PORT
 *                      or ipc://PATH; PORT 0: the server binds an ephemeral port and
 *                      tells the driver. Tests by default: rtt,push64,push1m.
 *   --tests LIST       comma-separated subset of rtt,pair,push64,push1m,unix
 *   --server-netns NS  run every server in network namespace NS
 *                      (nsenter --net=/run/netns/NS); the driver stays where it is:
 *                      two "hosts" of tests/rigs/netns-up.sh
 *   --tls-cert F --tls-key F --tls-ca F
 *                      TLS material for tls+tcp:// URLs, used as fiber uses it
 *                      (detail/tls_config.hpp): both sides present CERT/KEY;
 *                      with a CA both verify the peer (the client checks the
 *                      URL host against the certificate's names); without one
 *                      the channel is encrypted, unauthenticated.
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
#include <nng/supplemental/tls/tls.h>
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

/* TLS material (--tls-*); the server gets it through the environment. */
static const char *tls_cert, *tls_key, *tls_ca;
static const char *server_netns;

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(1);
	}
	size_t cap = 1 << 16, n = 0, r;
	char *b = malloc(cap);
	while ((r = fread(b + n, 1, cap - n - 1, f)) > 0) {
		n += r;
		if (n + 1 == cap) b = realloc(b, cap *= 2);
	}
	fclose(f);
	b[n] = 0;
	return b;
}

/* An nng TLS config as fiber builds it (detail/tls_config.hpp). */
static nng_tls_config *tls_config(int server)
{
	nng_tls_config *cfg;
	int rv;
	if ((rv = nng_tls_config_alloc(&cfg, server ? NNG_TLS_MODE_SERVER : NNG_TLS_MODE_CLIENT)) != 0)
		die("tls config (is nng built with TLS?)", rv);
	if (tls_cert && *tls_cert) {
		char *cert = slurp(tls_cert), *key = slurp(tls_key && *tls_key ? tls_key : tls_cert);
		if ((rv = nng_tls_config_own_cert(cfg, cert, key, NULL)) != 0) die("tls own cert", rv);
		free(cert);
		free(key);
	} else if (server) {
		fprintf(stderr, "a tls+tcp:// server needs --tls-cert and --tls-key\n");
		exit(1);
	}
	if (tls_ca && *tls_ca) {
		if ((rv = nng_tls_config_ca_file(cfg, tls_ca)) != 0) die("tls ca file", rv);
		if ((rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) != 0) die("tls auth mode", rv);
	} else if ((rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE)) != 0) {
		die("tls auth mode", rv);
	}
	return cfg;
}

/* Listens on url; returns the bound TCP port (0 for ipc). */
static int sp_listen(nng_socket s, const char *url)
{
	nng_listener l;
	int rv, port = 0;
	if ((rv = nng_listener_create(&l, s, url)) != 0) die("listener", rv);
	if (!strncmp(url, "tls+", 4)) {
		nng_tls_config *cfg = tls_config(1);
		if ((rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg)) != 0) die("listener tls", rv);
		nng_tls_config_free(cfg); /* the listener holds its own reference */
	}
	if ((rv = nng_listener_start(l, 0)) != 0) die("listen", rv);
	if (strncmp(url, "ipc", 3)) nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port);
	return port;
}

static void sp_dial(nng_socket s, const char *url)
{
	nng_dialer d;
	int rv;
	if ((rv = nng_dialer_create(&d, s, url)) != 0) die("dialer", rv);
	if (!strncmp(url, "tls+", 4)) {
		nng_tls_config *cfg = tls_config(0);
		if ((rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg)) != 0) die("dialer tls", rv);
		nng_tls_config_free(cfg);
	}
	if ((rv = nng_dialer_start(d, 0)) != 0) die("dial", rv);
}

static const char *label(const char *url)
{
	return !strncmp(url, "ipc", 3) ? "ipc" : !strncmp(url, "tls+", 4) ? "tls" : "tcp";
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
	int port = sp_listen(s, url);
	printf("READY %d\n", port);
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
/* Starts "<self> serve proto url count" (in --server-netns NS when given);
 * dial_url gets the URL to dial: url with a ":0" port replaced by the port
 * the server bound. */
static FILE *start_server(const char *proto, const char *url, long count, char *dial_url, size_t dial_size)
{
	char cmd[1024], prefix[256] = "";
	if (server_netns) snprintf(prefix, sizeof prefix, "nsenter --net=/run/netns/%s ", server_netns);
	snprintf(cmd, sizeof cmd, "%s/proc/%d/exe serve %s %s %ld", prefix, (int) getpid(),
	    proto, url, count);
	FILE *f = popen(cmd, "r");
	char line[128];
	int port = 0;
	if (!f || !fgets(line, sizeof line, f) || sscanf(line, "READY %d", &port) != 1) {
		fprintf(stderr, "server did not start: %s\n", cmd);
		exit(1);
	}
	snprintf(dial_url, dial_size, "%s", url);
	size_t n = strlen(dial_url);
	if (port > 0 && n >= 2 && !strcmp(dial_url + n - 2, ":0"))
		snprintf(dial_url + n - 1, dial_size - (n - 1), "%d", port);
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
	char dial[512];
	FILE *srv = start_server(!strcmp(proto, "req") ? "rep" : "pair", url, total, dial, sizeof dial);
	nng_socket s;
	int rv;
	if ((rv = open_proto(proto, &s)) != 0) die("open", rv);
	sp_dial(s, dial);
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
	    !strcmp(proto, "req") ? "REQ/REP" : "PAIR1", label(url),
	    rtt[trips / 2], rtt[(long) (trips * 0.99)], sum / trips, trips);
	fflush(stdout);
	free(rtt);
}

static double push_once(const char *url, size_t size, long count)
{
	char dial[512];
	FILE *srv = start_server("pull", url, count, dial, sizeof dial);
	nng_socket s;
	nng_msg *m;
	int rv;
	if ((rv = nng_push0_open(&s)) != 0) die("open", rv);
	nng_socket_set_int(s, NNG_OPT_SENDBUF, 128); /* may be unsupported */
	sp_dial(s, dial);
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
	    label(url), size, med, med * size / 1048576.0, count);
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

static int has_test(const char *tests, const char *t)
{
	size_t n = strlen(t);
	for (const char *p = tests; (p = strstr(p, t)) != NULL; p += n)
		if ((p == tests || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "serve")) {
		tls_cert = getenv("NNG_PINGPONG_TLS_CERT");
		tls_key = getenv("NNG_PINGPONG_TLS_KEY");
		tls_ca = getenv("NNG_PINGPONG_TLS_CA");
		pin(1);
		return serve(argc, argv);
	}
	pin(0);
	const char *url = NULL, *tests = NULL;
	char *pos[4];
	int npos = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int more = i + 1 < argc;
		if (!strcmp(a, "--url") && more) url = argv[++i];
		else if (!strcmp(a, "--tests") && more) tests = argv[++i];
		else if (!strcmp(a, "--server-netns") && more) server_netns = argv[++i];
		else if (!strcmp(a, "--tls-cert") && more) tls_cert = argv[++i];
		else if (!strcmp(a, "--tls-key") && more) tls_key = argv[++i];
		else if (!strcmp(a, "--tls-ca") && more) tls_ca = argv[++i];
		else if (a[0] != '-' && npos < 4) pos[npos++] = argv[i];
		else {
			fprintf(stderr, "nng_pingpong: unknown argument %s (see the comment at the top of nng_pingpong.c)\n", a);
			return 2;
		}
	}
	/* The servers (popen'ed children) read the TLS material from here. */
	if (tls_cert) setenv("NNG_PINGPONG_TLS_CERT", tls_cert, 1);
	if (tls_key) setenv("NNG_PINGPONG_TLS_KEY", tls_key, 1);
	if (tls_ca) setenv("NNG_PINGPONG_TLS_CA", tls_ca, 1);
	long trips = npos > 0 ? atol(pos[0]) : 100000;
	long n_small = npos > 1 ? atol(pos[1]) : 200000;
	long n_big = npos > 2 ? atol(pos[2]) : 2000;
	int reps = npos > 3 ? atoi(pos[3]) : 3;
	if (reps < 1 || reps > 16) reps = 3;
	if (!tests) tests = url ? "rtt,push64,push1m" : "unix,rtt,pair,push64,push1m";
	if (has_test(tests, "unix")) raw_unix(trips);
	printf("nng %s  PIN=%s%s%s\n", nng_version(), getenv("PIN") ? getenv("PIN") : "(unset)",
	    server_netns ? "  server in netns " : "", server_netns ? server_netns : "");
	fflush(stdout);
	if (url) {
		if (has_test(tests, "rtt")) pingpong("req", url, trips);
		if (has_test(tests, "pair")) pingpong("pair", url, trips);
		if (has_test(tests, "push64")) pushpull(url, 64, n_small, reps);
		if (has_test(tests, "push1m")) pushpull(url, 1 << 20, n_big, reps);
		return 0;
	}
	char ipc[128], tcp[64];
	snprintf(ipc, sizeof ipc, "ipc:///tmp/nng_pingpong_%d.ipc", (int) getpid());
	snprintf(tcp, sizeof tcp, "tcp://127.0.0.1:%d", 20000 + (int) getpid() % 20000);
	if (has_test(tests, "rtt")) {
		pingpong("req", ipc, trips);
		pingpong("req", tcp, trips);
	}
	if (has_test(tests, "pair")) {
		pingpong("pair", ipc, trips);
		pingpong("pair", tcp, trips);
	}
	if (has_test(tests, "push64")) {
		pushpull(ipc, 64, n_small, reps);
		pushpull(tcp, 64, n_small, reps);
	}
	if (has_test(tests, "push1m")) {
		pushpull(ipc, 1 << 20, n_big, reps);
		pushpull(tcp, 1 << 20, n_big, reps);
	}
	unlink(ipc + 6);
	return 0;
}
