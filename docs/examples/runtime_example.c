/*
 * runtime_example.c - the example of docs/runtime.md: what an MPI runtime does with libspares
 * when one of its nodes dies. It checks the daemon, reads the job's map, reports the failure,
 * and prints where the ranks go.
 *
 *   cc -std=c99 -Wall -Wextra -o runtime_example runtime_example.c $(pkg-config --cflags --libs spares)
 *   ./runtime_example JOB_ID NODE [SOCKET]
 *
 * SOCKET defaults to $SPARES_SOCKET, else /run/sparesd/sparesd.sock. Exit status: 0 when the
 * daemon answered the report, 1 otherwise. Compiled and run by tests/install/install.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spares.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s JOB_ID NODE [SOCKET]\n", argv[0]);
        return 2;
    }
    uint32_t job = (uint32_t)strtoul(argv[1], NULL, 10);
    const char *node = argv[2];
    const char *socket = argc > 3 ? argv[3] : NULL; /* NULL: $SPARES_SOCKET or the default */

    spares_client *c = NULL;
    int rc = spares_connect(socket, &c);
    if (rc != SPARES_OK) {
        fprintf(stderr, "connect: %s\n", spares_strerror(rc));
        return 1;
    }

    /* Any protocol v1 request: here health, to see the daemon's version. */
    char *reply = NULL;
    rc = spares_request(c, "{\"version\":1,\"kind\":\"health\"}", &reply);
    if (rc != SPARES_OK) {
        fprintf(stderr, "health: %s: %s\n", spares_strerror(rc), spares_last_error(c));
        spares_disconnect(c);
        return 1;
    }
    printf("HEALTH %s\n", reply);
    spares_free(reply);

    /* The job's current map (the document of `spares plan -o`). */
    char *map = NULL;
    rc = spares_get_map(c, job, &map);
    if (rc != SPARES_OK) {
        fprintf(stderr, "map of job %u: %s: %s\n", job, spares_strerror(rc), spares_last_error(c));
        spares_disconnect(c);
        return 1;
    }
    printf("MAP %zu bytes\n", strlen(map));
    spares_free(map);

    /* The failure: the reply says what moves where; the same report again gives the same
     * answer, so a runtime may retry after a broken connection. */
    rc = spares_report_failure(c, job, node, &reply);
    if (rc != SPARES_OK) {
        fprintf(stderr, "report %s: %s: %s\n", node, spares_strerror(rc), spares_last_error(c));
        spares_free(reply); /* on SPARES_EDAEMON the error reply, else NULL */
        spares_disconnect(c);
        return 1;
    }
    printf("REPLY %s\n", reply);
    spares_free(reply);
    spares_disconnect(c);
    return 0;
}
