/*
 * update_spank_env JOBID KEY=VALUE...: asks slurmctld to update job JOBID with the given
 * spank_job_env entries (as a libslurm client can; sbatch/scontrol cannot), which runs the
 * job_submit plugins' job_modify. Prints the refusal and, where slurmctld returns one (23.02
 * and later pass job_modify an err_msg), its message. Exit 0 if the update was accepted.
 * Used by tests/cluster/release-check.sh.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

int main(int argc, char **argv)
{
	job_desc_msg_t desc;
	job_array_resp_msg_t *resp = NULL;
	int rc;
	uint32_t i;

	if (argc < 3) {
		fprintf(stderr, "usage: update_spank_env JOBID KEY=VALUE...\n");
		return 2;
	}
	slurm_init(NULL);
	slurm_init_job_desc_msg(&desc);
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(26, 5, 0)
	desc.step_id.job_id = (uint32_t)strtoul(argv[1], NULL, 10);
#else
	desc.job_id = (uint32_t)strtoul(argv[1], NULL, 10);
#endif
	desc.spank_job_env = argv + 2;
	desc.spank_job_env_size = argc - 2;

	rc = slurm_update_job2(&desc, &resp);
	if (rc != SLURM_SUCCESS)
		printf("update refused: %s\n", slurm_strerror(errno));
	for (i = 0; resp && i < resp->job_array_count; i++) {
		if (resp->error_code[i] != SLURM_SUCCESS)
			rc = SLURM_ERROR;
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0)
		printf("job %s: %s%s%s\n", resp->job_array_id[i],
		       slurm_strerror(resp->error_code[i]),
		       resp->err_msg && resp->err_msg[i] ? ": " : "",
		       resp->err_msg && resp->err_msg[i] ? resp->err_msg[i] : "");
#else
		printf("job %s: %s\n", resp->job_array_id[i],
		       slurm_strerror(resp->error_code[i]));
#endif
	}
	if (resp)
		slurm_free_job_array_resp(resp);
	slurm_fini();
	return rc == SLURM_SUCCESS ? 0 : 1;
}
