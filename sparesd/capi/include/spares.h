/*
 * spares.h - C client of sparesd (wire protocol v1), for MPI runtimes.
 *
 * Link with -lspares (libspares.so or libspares.a; the static library also needs
 * -lmunge -lpthread -ldl -lm). Every function returns a status (SPARES_OK = 0) and never aborts the
 * caller: a panic inside the library becomes SPARES_EPANIC; a daemon that does not answer
 * becomes SPARES_ETIMEDOUT after the client's timeout (60 s by default, spares_set_timeout),
 * and a reply longer than the client's limit (64 MiB by default, spares_set_max_reply)
 * becomes SPARES_ETOOBIG without buffering the rest. Strings returned through
 * `char **` are owned by the caller and released with spares_free(). A client is one
 * connection; use it from one thread at a time (or one client per thread).
 *
 *   spares_client *c;
 *   char *reply;
 *   if (spares_connect(NULL, &c) == SPARES_OK) {
 *       if (spares_report_failure(c, job_id, "node06", &reply) == SPARES_OK) {
 *           ... parse reply: {"version":1,"ok":true,"outcome":"substituted","moves":[...],...}
 *           spares_free(reply);
 *       } else {
 *           fprintf(stderr, "%s\n", spares_last_error(c));
 *       }
 *       spares_disconnect(c);
 *   }
 *
 * See docs/protocol.md for the replies and docs/sparesd.md for the daemon.
 */
#ifndef SPARES_H
#define SPARES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPARES_PROTOCOL_VERSION 1

/* Status codes. */
#define SPARES_OK        0 /* success */
#define SPARES_EINVAL    1 /* a NULL pointer or a string that is not UTF-8 */
#define SPARES_ECONNECT  2 /* the daemon's socket cannot be reached */
#define SPARES_EIO       3 /* the connection broke; connect again */
#define SPARES_EPROTO    4 /* the daemon's reply is not protocol v1 */
#define SPARES_EDAEMON   5 /* the daemon refused the request (see spares_last_error) */
#define SPARES_EPANIC    6 /* a bug inside libspares; the client should be disconnected */
#define SPARES_ETIMEDOUT 7 /* no whole reply within the timeout; disconnect, connect again */
#define SPARES_ETOOBIG   8 /* the reply is longer than the limit; disconnect, connect again */

typedef struct spares_client spares_client;

/* Connects to sparesd. socket_path NULL means $SPARES_SOCKET, else /run/sparesd/sparesd.sock.
 * Waits at most 10 s for a daemon that accepts nothing (SPARES_ETIMEDOUT).
 * On success *out is a client to release with spares_disconnect(). */
int spares_connect(const char *socket_path, spares_client **out);

/* Connects to sparesd's TCP listener ("host:port", for runtimes on other nodes) and
 * authenticates with a MUNGE credential of the calling process (munge_socket NULL means
 * libmunge's default socket). Then the same calls as over the Unix socket. */
int spares_connect_tcp(const char *host_port, const char *munge_socket, spares_client **out);

/* Reports that `node` (host name, or coordinates such as "3,4,5") of job `job_id` failed.
 * *reply_json receives the daemon's reply line: outcome, moves in pipeline order, method used,
 * collisions before and after, and the new map. Reporting the same node again returns the
 * same answer. On SPARES_EDAEMON *reply_json holds the error reply (or NULL). */
int spares_report_failure(spares_client *client, uint32_t job_id, const char *node,
                          char **reply_json);

/* Re-maps the ranks of job `job_id` onto its alive nodes for fewer collisions, moving at most
 * `max_moves` ranks (UINT32_MAX: as many as the daemon's [remap] max_moves allows), before a
 * relaunch from a checkpoint. *reply_json receives the reply line: collisions before and after,
 * the moved ranks, the moves and the new map, which later failures slide from. The owner,
 * root or the Slurm user only, as for spares_report_failure. */
int spares_remap(spares_client *client, uint32_t job_id, uint32_t max_moves, char **reply_json);

/* The job's current map document (JSON, the format of `spares plan -o`). */
int spares_get_map(spares_client *client, uint32_t job_id, char **map_json);

/* Any protocol v1 request line (without newline); *reply_json receives the reply line. */
int spares_request(spares_client *client, const char *request_json, char **reply_json);

/* The time one request may take (sending it, receiving the whole reply), in milliseconds;
 * 0 waits forever. Default 60000. */
int spares_set_timeout(spares_client *client, uint32_t timeout_ms);

/* The largest reply accepted, in bytes (at least 1024, else SPARES_EINVAL). Default 64 MiB. */
int spares_set_max_reply(spares_client *client, size_t max_bytes);

/* The last error on this client ("" when none): "code: message" for SPARES_EDAEMON.
 * Valid until the next call on the client. */
const char *spares_last_error(const spares_client *client);

/* A static description of a status code. */
const char *spares_strerror(int status);

/* Releases a string returned by this library. NULL is allowed. */
void spares_free(char *s);

/* Closes the connection and releases the client. NULL is allowed. */
void spares_disconnect(spares_client *client);

#ifdef __cplusplus
}
#endif

#endif /* SPARES_H */
