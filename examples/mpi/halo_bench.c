/*
 * halo_bench: the seeds' measurement in MPI. One rank per compute node of a spare map, rank r at
 * logical coordinate (r % P0, r / P0 % P1, r / (P0 P1)) of the job's grid (the map's order: the
 * hostfile's line r+1 is rank r's node). Times, as the slowest rank sees them:
 *   - the 7-point halo exchange: MPI_Irecv/MPI_Isend of --size bytes with each logical
 *     neighbour (up to 6), then MPI_Waitall;
 *   - MPI_Barrier;
 *   - MPI_Allreduce (sum of doubles) of --allreduce bytes;
 * each --iters times after one untimed round, and prints the means. With --baseline FILE (this
 * program's output on the failure-free map) it also prints the slowdown map / baseline.
 *
 *   SLURM_HOSTFILE=$SLURM_SPARES_HOSTFILE srun --mpi=pmix --distribution=arbitrary -n 18 \
 *       halo_bench --shape 3x3x2 [--size 4MiB] [--allreduce 64KiB] [--iters 20] [--periodic]
 *       [--baseline FILE]
 */
#include <mpi.h>

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_LEN 64

struct args {
    int shape[3];
    long size, allreduce, iters;
    int periodic;
    const char *baseline;
};

static int rank, nranks;

static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "halo_bench[%d]: error: ", rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

/* "4MiB", "64KiB", "1M", "512" -> bytes; -1 if not a size. */
static long parse_bytes(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || v < 0)
        return -1;
    if (*end == 0 || !strcmp(end, "B"))
        return v;
    if (!strcmp(end, "K") || !strcmp(end, "KiB"))
        return v << 10;
    if (!strcmp(end, "M") || !strcmp(end, "MiB"))
        return v << 20;
    if (!strcmp(end, "G") || !strcmp(end, "GiB"))
        return v << 30;
    return -1;
}

static void human(long b, char *out, size_t n)
{
    if (b >= 1 << 20 && b % (1 << 20) == 0)
        snprintf(out, n, "%ld MiB", b >> 20);
    else if (b >= 1 << 10 && b % (1 << 10) == 0)
        snprintf(out, n, "%ld KiB", b >> 10);
    else
        snprintf(out, n, "%ld B", b);
}

static void usage(void)
{
    if (rank == 0)
        fprintf(stderr, "usage: halo_bench --shape PxQxR [--size 4MiB] [--allreduce 64KiB] "
                        "[--iters 20] [--periodic] [--baseline FILE]\n");
    MPI_Finalize();
    exit(2);
}

static struct args parse_args(int argc, char **argv)
{
    struct args a = {{0, 0, 0}, 4L << 20, 64L << 10, 20, 0, NULL};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--periodic")) {
            a.periodic = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(o, "--shape")) {
            char extra;
            if (sscanf(v, "%dx%dx%d%c", &a.shape[0], &a.shape[1], &a.shape[2], &extra) != 3 ||
                a.shape[0] < 1 || a.shape[1] < 1 || a.shape[2] < 1)
                die("--shape %s: want PxQxR, e.g. 3x3x2", v);
        } else if (!strcmp(o, "--size") || !strcmp(o, "--allreduce")) {
            long b = parse_bytes(v);
            if (b < 8 || b > (1L << 30))
                die("%s %s: want 8 B to 1 GiB, e.g. 4MiB, 64KiB, 1M, 4096", o, v);
            *(!strcmp(o, "--size") ? &a.size : &a.allreduce) = b;
        } else if (!strcmp(o, "--iters")) {
            a.iters = strtol(v, NULL, 10);
            if (a.iters < 1)
                die("--iters %s: want a positive number", v);
        } else if (!strcmp(o, "--baseline")) {
            a.baseline = v;
        } else {
            usage();
        }
    }
    if (!a.shape[0])
        die("--shape PxQxR is required (the job's logical grid, e.g. --job-shape's)");
    if ((long)a.shape[0] * a.shape[1] * a.shape[2] != nranks)
        die("--shape %dx%dx%d has %d ranks, the step has %d", a.shape[0], a.shape[1], a.shape[2],
            a.shape[0] * a.shape[1] * a.shape[2], nranks);
    return a;
}

/* The logical neighbours of this rank: peer[d] for direction d = 2*dim + side (side 0 minus,
 * 1 plus), -1 where a mesh edge has none. */
static void neighbours(const struct args *a, int peer[6])
{
    int c[3] = {rank % a->shape[0], rank / a->shape[0] % a->shape[1],
                rank / (a->shape[0] * a->shape[1])};
    for (int dim = 0; dim < 3; dim++)
        for (int side = 0; side < 2; side++) {
            int p = a->shape[dim], x = c[dim] + (side ? 1 : -1), n[3];
            peer[2 * dim + side] = -1;
            if (p == 1)
                continue;
            if (x < 0 || x >= p) {
                if (!a->periodic)
                    continue;
                x = (x + p) % p;
            }
            memcpy(n, c, sizeof n);
            n[dim] = x;
            peer[2 * dim + side] = n[0] + a->shape[0] * (n[1] + a->shape[1] * n[2]);
        }
}

/* One exchange. A message's tag is its direction as the sender sees it, so the receiver takes
 * from its minus neighbour what that one sent plus-wards: right even when both sides are the
 * same rank (a ring of 2). Each received buffer is checked: its bytes are the sender's rank. */
static void exchange(const struct args *a, const int peer[6], char *send, char *recv[6])
{
    MPI_Request req[12];
    /* A real status array: GCC 12 warns about MPICH's MPI_STATUSES_IGNORE as a 0-byte region. */
    MPI_Status status[12];
    int n = 0;
    for (int d = 0; d < 6; d++)
        if (peer[d] >= 0) {
            recv[d][0] = recv[d][a->size - 1] = (char)0xff;
            MPI_Irecv(recv[d], (int)a->size, MPI_BYTE, peer[d], d ^ 1, MPI_COMM_WORLD, &req[n++]);
        }
    for (int d = 0; d < 6; d++)
        if (peer[d] >= 0)
            MPI_Isend(send, (int)a->size, MPI_BYTE, peer[d], d, MPI_COMM_WORLD, &req[n++]);
    MPI_Waitall(n, req, status);
    for (int d = 0; d < 6; d++)
        if (peer[d] >= 0 &&
            (recv[d][0] != (char)peer[d] || recv[d][a->size - 1] != (char)peer[d]))
            die("halo from rank %d (direction %d) has wrong contents", peer[d], d);
}

/* The means of a previous run ("mean (ms): ..." line) and its "config:" line. */
static int read_baseline(const char *path, const char *config, double base[3])
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "halo_bench: error: --baseline %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[512];
    int have = 0, same = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "config: ", 8))
            same = !strcmp(line, config);
        else if (sscanf(line, "mean (ms): halo %lf barrier %lf allreduce %lf", &base[0], &base[1],
                        &base[2]) == 3)
            have = 1;
    }
    fclose(f);
    if (!have) {
        fprintf(stderr, "halo_bench: error: --baseline %s has no \"mean (ms):\" line\n", path);
        return -1;
    }
    /* Ratios of different sizes or grids would mean nothing. */
    if (!same) {
        fprintf(stderr, "halo_bench: error: --baseline %s was measured with another config "
                        "(want \"%s\")\n", path, config);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    struct args a = parse_args(argc, argv);

    char config[256];
    snprintf(config, sizeof config,
             "config: ranks %d shape %dx%dx%d %s size %ld allreduce %ld iters %ld", nranks,
             a.shape[0], a.shape[1], a.shape[2], a.periodic ? "periodic" : "non-periodic", a.size,
             a.allreduce, a.iters);
    double base[3];
    int bad = 0;
    if (rank == 0 && a.baseline)
        bad = read_baseline(a.baseline, config, base) != 0;
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (bad) {
        MPI_Finalize();
        return 2;
    }

    /* Where each rank runs: SLURMD_NODENAME, since on the test cluster every "node" has the
     * same host name (MPI_Get_processor_name would say the machine's). */
    char name[NAME_LEN] = {0};
    const char *node = getenv("SLURMD_NODENAME");
    if (node)
        snprintf(name, sizeof name, "%s", node);
    else {
        int len;
        MPI_Get_processor_name(name, &len);
    }
    char *names = rank == 0 ? malloc((size_t)nranks * NAME_LEN) : NULL;
    MPI_Gather(name, NAME_LEN, MPI_CHAR, names, NAME_LEN, MPI_CHAR, 0, MPI_COMM_WORLD);

    int peer[6];
    neighbours(&a, peer);
    char *send = malloc(a.size), *recv[6] = {0};
    memset(send, rank, a.size);
    for (int d = 0; d < 6; d++)
        if (peer[d] >= 0 && !(recv[d] = malloc(a.size)))
            die("out of memory");
    long count = a.allreduce / 8;
    double *in = malloc(count * sizeof *in), *out = malloc(count * sizeof *out);
    if (!send || !in || !out)
        die("out of memory");
    for (long i = 0; i < count; i++)
        in[i] = rank + i;

    /* One untimed round of each: connections and buffers warm. */
    exchange(&a, peer, send, recv);
    MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    /* The sum of rank + i over ranks, exact in doubles: a wrong reduction fails the run. */
    double want = (double)nranks * (nranks - 1) / 2;
    if (out[0] != want || out[count - 1] != want + (double)nranks * (count - 1))
        die("allreduce result %g, want %g", out[0], want);

    double t[3] = {0, 0, 0}, t0;
    for (long i = 0; i < a.iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD); /* all start together, as in a stencil step */
        t0 = MPI_Wtime();
        exchange(&a, peer, send, recv);
        t[0] += MPI_Wtime() - t0;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (long i = 0; i < a.iters; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    t[1] = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (long i = 0; i < a.iters; i++)
        MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    t[2] = MPI_Wtime() - t0;

    /* The slowest rank sets the pace of a stencil step. */
    double worst[3];
    MPI_Reduce(t, worst, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        char hs[32], as[32];
        human(a.size, hs, sizeof hs);
        human(a.allreduce, as, sizeof as);
        for (int r = 0; r < nranks; r++)
            printf("rank %d on %s\n", r, names + (size_t)r * NAME_LEN);
        printf("%s\n", config);
        double m[3];
        for (int k = 0; k < 3; k++)
            m[k] = worst[k] / a.iters * 1e3;
        printf("halo %s x neighbours %9.3f ms   barrier %7.3f ms   allreduce %s %8.3f ms\n", hs,
               m[0], m[1], as, m[2]);
        printf("mean (ms): halo %.6f barrier %.6f allreduce %.6f\n", m[0], m[1], m[2]);
        if (a.baseline)
            printf("slowdown (map / baseline): halo %.3f   barrier %.3f   allreduce %.3f\n",
                   m[0] / base[0], m[1] / base[1], m[2] / base[2]);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
