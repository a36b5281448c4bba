/* Built and run by tests/c_client.rs against a running sparesd: usage client SOCKET JOB NODE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spares.h"

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return 1; } } while (0)

int main(int argc, char **argv)
{
    spares_client *c = NULL;
    char *map = NULL, *reply = NULL, *again = NULL, *bad = NULL, *raw = NULL, *remap = NULL;
    int st;

    CHECK(argc == 4, "usage: %s SOCKET JOB NODE", argv[0]);
    unsigned job = (unsigned)strtoul(argv[2], NULL, 10);

    CHECK(spares_connect("/nonexistent/sparesd.sock", &c) == SPARES_ECONNECT && c == NULL,
          "connecting to a missing socket must fail");
    CHECK(spares_connect(NULL, NULL) == SPARES_EINVAL, "NULL out pointer");
    CHECK(spares_connect_tcp("127.0.0.1:1", NULL, &c) == SPARES_ECONNECT && c == NULL,
          "nobody listens on TCP port 1");
    st = spares_connect(argv[1], &c);
    CHECK(st == SPARES_OK, "connect: %s", spares_strerror(st));

    st = spares_get_map(c, job, &map);
    CHECK(st == SPARES_OK, "get_map: %s: %s", spares_strerror(st), spares_last_error(c));
    CHECK(strstr(map, "\"ranks\"") != NULL, "map without ranks: %s", map);
    printf("MAP %s\n", map);

    st = spares_report_failure(c, job, argv[3], &reply);
    CHECK(st == SPARES_OK, "report: %s: %s", spares_strerror(st), spares_last_error(c));
    printf("REPLY %s\n", reply);

    /* The same failure again: the same answer. */
    st = spares_report_failure(c, job, argv[3], &again);
    CHECK(st == SPARES_OK, "report again: %s", spares_last_error(c));
    printf("AGAIN %s\n", again);

    st = spares_report_failure(c, job, "no-such-node", &bad);
    CHECK(st == SPARES_EDAEMON, "unknown node must be refused, got %d", st);
    CHECK(strncmp(spares_last_error(c), "unknown_node", 12) == 0, "last error: %s",
          spares_last_error(c));
    printf("ERROR %s\n", spares_last_error(c));

    st = spares_remap(c, job, 4, &remap);
    CHECK(st == SPARES_OK, "remap: %s: %s", spares_strerror(st), spares_last_error(c));
    printf("REMAP %s\n", remap);
    CHECK(spares_remap(c, job, 4, NULL) == SPARES_EINVAL, "NULL reply pointer");
    CHECK(spares_remap(NULL, job, 4, &bad) == SPARES_EINVAL, "NULL client");

    st = spares_request(c, "{\"version\":1,\"kind\":\"health\"}", &raw);
    CHECK(st == SPARES_OK && strstr(raw, "\"status\":\"ok\"") != NULL, "health: %d", st);
    CHECK(spares_report_failure(c, job, NULL, &raw) == SPARES_EINVAL, "NULL node");

    spares_free(map);
    spares_free(reply);
    spares_free(again);
    spares_free(bad);
    spares_free(raw);
    spares_free(remap);
    spares_free(NULL);
    spares_disconnect(c);
    spares_disconnect(NULL);
    printf("C CLIENT OK\n");
    return 0;
}
