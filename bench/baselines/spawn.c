// SPDX-License-Identifier: BSL-1.0
/*
 * spawn.c - process spawn cost: run /bin/true N times (default 1000) via
 * posix_spawn() and via fork()+execv(), each followed by waitpid();
 * prints median / p99 / mean microseconds per spawn+exit+reap.
 * Also times fork()+_exit()+waitpid() without exec.
 * Build: gcc -O2 -o spawn spawn.c      Run: ./spawn [N]
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;
	return (x > y) - (x < y);
}

static void report(const char *name, double *t, int n)
{
	double sum = 0;
	for (int i = 0; i < n; i++) sum += t[i];
	qsort(t, n, sizeof(double), cmpd);
	printf("%-28s median %8.1f us  p99 %8.1f us  mean %8.1f us  (n=%d)\n", name,
	    t[n / 2], t[(int) (n * 0.99)], sum / n, n);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	double *t = malloc(sizeof(double) * n);
	char *args[] = {"/bin/true", NULL};
	int st;

	for (int i = 0; i < n + 10; i++) {
		double t0 = now_us();
		pid_t pid;
		if (posix_spawn(&pid, "/bin/true", NULL, NULL, args, environ)) return 1;
		waitpid(pid, &st, 0);
		if (i >= 10) t[i - 10] = now_us() - t0;
	}
	report("posix_spawn /bin/true", t, n);

	for (int i = 0; i < n + 10; i++) {
		double t0 = now_us();
		pid_t pid = fork();
		if (pid == 0) {
			execv("/bin/true", args);
			_exit(127);
		}
		waitpid(pid, &st, 0);
		if (i >= 10) t[i - 10] = now_us() - t0;
	}
	report("fork+execv /bin/true", t, n);

	for (int i = 0; i < n + 10; i++) {
		double t0 = now_us();
		pid_t pid = fork();
		if (pid == 0) _exit(0);
		waitpid(pid, &st, 0);
		if (i >= 10) t[i - 10] = now_us() - t0;
	}
	report("fork+_exit (no exec)", t, n);
	return 0;
}
