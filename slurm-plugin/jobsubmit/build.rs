//! The `job_modify` signature of the Slurm release the headers are from
//! (published by slurm-sys, `links = "slurm"`): `cfg(slurm_job_modify_err_msg)`
//! when it takes the fourth argument `char **err_msg` (since 23.02).

use std::env;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(slurm_job_modify_err_msg)");
    println!("cargo:rerun-if-env-changed=DEP_SLURM_JOB_MODIFY_ERR_MSG");
    let err_msg = env::var("DEP_SLURM_JOB_MODIFY_ERR_MSG")
        .expect("slurm-sys publishes DEP_SLURM_JOB_MODIFY_ERR_MSG (links = \"slurm\")");
    if err_msg == "1" {
        println!("cargo:rustc-cfg=slurm_job_modify_err_msg");
    }
}
