/* Input of bindgen (see build.rs): Slurm's public headers, nothing else. */
#include <stdint.h>
#include <slurm/slurm_version.h>
#include <slurm/slurm_errno.h>
#include <slurm/slurm.h>
#include <slurm/spank.h>
