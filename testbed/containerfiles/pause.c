/* pause: the process that holds a pod's namespaces open (the kubelet's sandbox image).
 *
 * It sleeps until told to stop, and as PID 1 of the pod's PID namespace it reaps any orphan
 * that ends up as its child, so zombies never pile up. SIGINT and SIGTERM end it at once with
 * status 0, which is what the kubelet expects when it tears a sandbox down.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signo) {
    (void)signo;
    _exit(0);
}

static void reap(int signo) {
    (void)signo;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("radixfleet pause 1.0");
        return 0;
    }
    if (getpid() != 1) {
        fputs("pause: warning: not running as PID 1, orphans will not be reaped here\n", stderr);
    }
    struct sigaction on_stop = {.sa_handler = stop};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    if (sigaction(SIGINT, &on_stop, NULL) < 0 || sigaction(SIGTERM, &on_stop, NULL) < 0 ||
        sigaction(SIGCHLD, &on_child, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    for (;;) {
        pause();
    }
}
