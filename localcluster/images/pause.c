/*
 * The local cluster's sandbox ("pause") process: it holds a pod's namespaces open, reaps any
 * child that the pod's shared PID namespace hands to it, and exits 0 on SIGTERM or SIGINT.
 * Built by mpiplat.localcluster.images with `gcc -static -Os` into the image
 * mpiplat.local/pause:1 as /pause.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

static void on_child(int sig)
{
	int saved = errno;

	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	errno = saved;
}

static int handle(int sig, void (*fn)(int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = sig == SIGCHLD ? SA_NOCLDSTOP | SA_RESTART : 0;
	return sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		puts("mpiplat pause 1");
		return 0;
	}
	if (getpid() != 1)
		fputs("pause: warning: not running as PID 1\n", stderr);
	/* Block the signals while checking `stop`, and wait with sigsuspend (which unblocks them
	 * atomically), so a signal that comes between the check and the wait is not lost. */
	sigset_t block, wait_mask;

	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &block, &wait_mask) || handle(SIGINT, on_stop) || handle(SIGTERM, on_stop)
	    || handle(SIGCHLD, on_child)) {
		perror("pause: signals");
		return 1;
	}
	sigdelset(&wait_mask, SIGINT);
	sigdelset(&wait_mask, SIGTERM);
	sigdelset(&wait_mask, SIGCHLD);
	while (!stop)
		sigsuspend(&wait_mask);
	return 0;
}
