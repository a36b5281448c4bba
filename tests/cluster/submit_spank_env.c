/*
 * submit_spank_env: submits a one-node batch job (`true`) whose
 * spank_job_env holds the entries given on the command line, e.g.
 *
 *   submit_spank_env '_SLURM_SPANK_OPTION_spares_spares=bogus'
 *
 * sbatch checks --spares itself (the SPANK plugin's option callback), so a
 * malformed value never reaches slurmctld from sbatch. This helper bypasses
 * that check to exercise job_submit_spares.so inside slurmctld.
 *
 * Prints "Submitted batch job N" and exits 0, or prints Slurm's error (and
 * libslurm prints the job_submit plugin's message) and exits 1.
 * Build: cc -o submit_spank_env submit_spank_env.c -lslurm
 */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

int main(int argc, char **argv)
{
	job_desc_msg_t desc;
	submit_response_msg_t *resp = NULL;
	char *env[] = { "PATH=/usr/bin:/bin", NULL };

	slurm_init(NULL); /* reads $SLURM_CONF */
	slurm_init_job_desc_msg(&desc);
	desc.name = "spares-submit-spank-env";
	desc.script = "#!/bin/sh\ntrue\n";
	/* No min_nodes: like sbatch without -N (job_submit reads -N against --job-shape). */
	desc.user_id = getuid();
	desc.group_id = getgid();
	desc.work_dir = "/tmp";
	desc.std_out = "/dev/null";
	desc.environment = env;
	desc.env_size = 1;
	desc.spank_job_env = argv + 1;
	desc.spank_job_env_size = argc - 1;

	if (slurm_submit_batch_job(&desc, &resp) != SLURM_SUCCESS) {
		fprintf(stderr, "submit_spank_env: submission failed: %s\n",
			slurm_strerror(errno)); /* slurm_get_errno() is gone since 24.11 */
		slurm_fini();
		return 1;
	}
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(26, 5, 0)
	/* 26.05 moved the job id into step_id. */
	printf("Submitted batch job %u\n", resp->step_id.job_id);
#else
	printf("Submitted batch job %u\n", resp->job_id);
#endif
	slurm_free_submit_response_response_msg(resp);
	slurm_fini();
	return 0;
}
