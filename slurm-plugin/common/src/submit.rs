//! What job_submit does with a new job, as plain Rust: read the options, ask the policy,
//! place the box, and say how to change the job (or why to reject it). The plugin shell only
//! copies fields in and out of `job_desc_msg_t`.

use std::path::Path;
use std::time::SystemTime;

use topology::grid::{format_coord, format_shape};

use crate::error::PluginError;
use crate::ffi::UserText;
use crate::job_env::{option_env_name, SparesOptions};
use crate::place::{self, NodeRequest, Pins};
use crate::policy::{self, Decision, JobFacts, Refusal};
use crate::sys;

/// The fields of a job descriptor the decision reads.
#[derive(Debug, Clone, Default)]
pub struct JobRequest {
    pub spank_env: Vec<String>,
    pub min_nodes: Option<u32>,
    /// `--nodelist`: nodes the box must contain.
    pub req_nodes: Option<UserText>,
    /// `--exclude`: nodes the box must not touch.
    pub exc_nodes: Option<UserText>,
    /// `--partition` (a comma list); none: the default partition of the free-node file.
    pub partition: Option<UserText>,
    /// `--time` in minutes, if given.
    pub time_limit_minutes: Option<u32>,
}

/// How to change the job.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Leave it as it is.
    Untouched,
    /// Pad it to `nodes`, pin it to `req_nodes`, and write the decision into its
    /// `spank_job_env`.
    Pad {
        nodes: u32,
        req_nodes: String,
        /// `spank_job_env` entries to set: the spare shape and compute shape decided here
        /// (`auto` resolved, the shape derived from `-N`), as the options the job's prolog
        /// reads, so every node builds the same map whatever the policy says by then.
        decision: Vec<(String, String)>,
        /// One line for slurmctld's log.
        summary: String,
        /// What the user reads at submission (sbatch prints it).
        user_message: String,
    },
}

fn reject(refusal: Refusal) -> PluginError {
    PluginError::Rejected {
        code: policy::refusal_code(refusal.1),
        message: format!("{}: {}", crate::LOG_PREFIX, refusal.0),
    }
}

/// A policy file that cannot be used: the administrators' problem
/// (`ESLURM_INTERNAL`: "Slurm internal error, contact system administrator").
fn reject_site(message: String) -> PluginError {
    PluginError::Rejected {
        code: sys::ESLURM_INTERNAL as i32,
        message: format!("{}: {message}", crate::LOG_PREFIX),
    }
}

/// Decides for one new job. `policy_path` is read only for a job that uses a spares option.
pub fn decide(
    policy_path: &Path,
    job: &JobRequest,
    pins: &mut Pins,
    now: SystemTime,
) -> Result<Change, PluginError> {
    let opts = SparesOptions::from_env(&job.spank_env);
    if opts.is_empty() {
        return Ok(Change::Untouched);
    }
    let req = opts.validate().map_err(PluginError::reject_spec)?;
    let policy = policy::cached(policy_path).map_err(|e| {
        reject_site(format!(
            "{e} (the job cannot be placed; tell the administrators)"
        ))
    })?;
    let facts = JobFacts {
        nodes: job.min_nodes,
        time_limit_minutes: job.time_limit_minutes,
        admitted: false,
    };
    let (plan, method, auto_reason) = match policy.decide_job(&req, &facts).map_err(reject)? {
        Decision::Untouched => return Ok(Change::Untouched),
        Decision::Spares {
            plan,
            method,
            auto_reason,
        } => (plan, method, auto_reason),
    };
    let box_nodes = u32::try_from(plan.box_nodes).map_err(|_| {
        reject(Refusal::node_count(format!(
            "a box of {} nodes is too large",
            plan.box_nodes
        )))
    })?;
    let free = match &policy.free_nodes_file {
        Some(path) => place::read_free_nodes(path, &policy.topology, policy.limits.max_file_bytes)
            .unwrap_or_else(|e| {
                log::warn!("{e}; every node counts as free");
                None
            }),
        None => None,
    };
    let request = NodeRequest::from_job(
        &policy,
        free.as_ref(),
        job.partition.as_ref(),
        job.exc_nodes.as_ref(),
        job.req_nodes.as_ref(),
    )
    .map_err(reject)?;
    let pinned = pins.busy(free.as_ref().map(|f| f.written));
    let placed = place::place(
        &policy,
        &plan,
        free.as_ref().map(|f| &f.nodes),
        &pinned,
        &request,
    )
    .map_err(reject)?;
    let nodes: Vec<u32> = placed
        .hosts
        .iter()
        .filter_map(|h| policy.topology.node(h))
        .collect();
    pins.add(now, nodes);
    let summary =
        format!(
        "spares {}{} job-shape {} method {}: box {} at {} ({} nodes, {} spares){}, req_nodes {}",
        plan.spares,
        auto_reason.as_ref().map(|r| format!(" (auto: {r})")).unwrap_or_default(),
        format_shape(&plan.compute),
        method,
        format_shape(&plan.box_extents),
        format_coord(&placed.origin),
        plan.box_nodes,
        plan.spare_nodes,
        if placed.waits {
            ", waiting for busy nodes"
        } else {
            ""
        },
        placed.hostlist
    );
    let name = |o: &str| option_env_name(crate::SPANK_PLUGIN_NAME, o);
    let decision = vec![
        (name("spares"), plan.spares.clone()),
        (name("job-shape"), format_shape(&plan.compute)),
    ];
    let user_message = format!(
        "{}: {} compute nodes as a {} grid, spares {}{}: the job gets the {} box, {box_nodes} nodes{}{}",
        crate::LOG_PREFIX,
        plan.compute_nodes,
        format_shape(&plan.compute),
        plan.spares,
        auto_reason
            .as_ref()
            .map(|r| format!(" (auto: {r})"))
            .unwrap_or_default(),
        format_shape(&plan.box_extents),
        if placed.waits {
            " (it waits for busy nodes)"
        } else {
            ""
        },
        request
            .partition_label
            .as_ref()
            .map(|p| format!(", in {p}"))
            .unwrap_or_default()
    );
    Ok(Change::Pad {
        nodes: box_nodes,
        req_nodes: placed.hostlist,
        decision,
        summary,
        user_message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::policy_dir;

    fn job(env: &[&str]) -> JobRequest {
        JobRequest {
            spank_env: env.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    const TEST_JOB: [&str; 2] = [
        "_SLURM_SPANK_OPTION_spares_spares=3D(2,1)",
        "_SLURM_SPANK_OPTION_spares_job_shape=3x3x2",
    ];

    #[test]
    fn the_test_job_is_padded_and_pinned() {
        let dir = policy_dir("submit", "max_fraction: 0.5\n");
        let mut pins = Pins::new();
        let c = decide(
            &dir.join("policy.yaml"),
            &job(&TEST_JOB),
            &mut pins,
            SystemTime::now(),
        )
        .unwrap();
        match c {
            Change::Pad {
                nodes,
                req_nodes,
                summary,
                user_message,
                ..
            } => {
                assert_eq!(nodes, 32);
                assert_eq!(req_nodes, "node[01-32]");
                assert!(
                    summary.contains("box 4x4x2 at (0,0,0) (32 nodes, 14 spares)"),
                    "{summary}"
                );
                assert_eq!(user_message, "spares: 18 compute nodes as a 3x3x2 grid, spares 3D(2,1): the job gets the 4x4x2 box, 32 nodes");
            }
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn node_counts_alone_are_shaped_and_the_decision_is_handed_to_the_nodes() {
        // `sbatch -N 18 --spares=auto`: job_submit derives 3x3x2, resolves auto, and writes
        // both into spank_job_env; the prolog's reading of those entries rebuilds the same
        // plan without -N (it had no --job-shape to go on before).
        let dir = policy_dir(
            "submit-auto",
            "max_fraction: 0.5
",
        );
        let mut pins = Pins::new();
        let mut j = job(&["_SLURM_SPANK_OPTION_spares_spares=auto"]);
        j.min_nodes = Some(18);
        let c = decide(&dir.join("policy.yaml"), &j, &mut pins, SystemTime::now()).unwrap();
        let Change::Pad {
            nodes, decision, ..
        } = c
        else {
            panic!("{c:?}")
        };
        assert_eq!(nodes, 32);
        assert_eq!(
            decision,
            vec![
                (
                    "_SLURM_SPANK_OPTION_spares_spares".to_string(),
                    "3D(2,1)".to_string()
                ),
                (
                    "_SLURM_SPANK_OPTION_spares_job_shape".to_string(),
                    "3x3x2".to_string()
                ),
            ]
        );
        let prolog_env: Vec<String> = decision
            .iter()
            .map(|(k, v)| format!("SPANK_{k}={v}"))
            .collect();
        let req = SparesOptions::from_prolog_env(&prolog_env)
            .validate()
            .unwrap();
        let p = policy::cached(&dir.join("policy.yaml")).unwrap();
        match p.decide(&req).unwrap() {
            Decision::Spares { plan, .. } => {
                assert_eq!(plan.compute, vec![3, 3, 2]);
                assert_eq!(plan.box_nodes, 32);
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn plain_jobs_do_not_even_read_the_policy() {
        let mut pins = Pins::new();
        let c = decide(
            Path::new("/nonexistent"),
            &job(&["A=1"]),
            &mut pins,
            SystemTime::now(),
        );
        assert_eq!(c.unwrap(), Change::Untouched);
    }

    #[test]
    fn each_rejection_has_the_code_that_fits() {
        // Every rejection used ESLURM_INVALID_NODE_COUNT, so sbatch printed "Node count
        // specification invalid" after a message about something else.
        let dir = policy_dir(
            "submit-codes",
            "on_no_placement: reject\nallowed: ['3D(1,1)', '3D(2,1)']\nmax_fraction: 0.6\n",
        );
        let policy = dir.join("policy.yaml");
        let now = SystemTime::now();
        let code = |env: &[&str], nodes: Option<u32>, nodelist: Option<&str>| {
            let mut j = job(env);
            j.min_nodes = nodes;
            j.req_nodes = nodelist.map(|n| UserText::Text(n.to_string()));
            decide(&policy, &j, &mut Pins::new(), now)
                .unwrap_err()
                .code() as u32
        };
        let spares = |s: &str| format!("_SLURM_SPANK_OPTION_spares_spares={s}");
        let shape = |s: &str| format!("_SLURM_SPANK_OPTION_spares_job_shape={s}");
        assert_eq!(code(&[&spares("3D(2;1)")], None, None), sys::ESPANK_BAD_ARG);
        assert_eq!(code(&[&shape("3x3x2")], None, None), sys::ESPANK_BAD_ARG);
        assert_eq!(code(&TEST_JOB, None, Some("other01")), sys::ESPANK_BAD_ARG);
        assert_eq!(
            code(&[&spares("auto")], None, None),
            sys::ESLURM_JOB_MISSING_SIZE_SPECIFICATION
        );
        assert_eq!(
            code(&TEST_JOB, Some(20), None),
            sys::ESLURM_INVALID_NODE_COUNT
        );
        assert_eq!(
            code(&[&spares("3D(1,2)"), &shape("2x2x2")], None, None),
            sys::ESLURM_ACCESS_DENIED
        );
        assert_eq!(
            code(&[&spares("3D(2,1)"), &shape("4x4x2")], None, None),
            sys::ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE
        );
        // The whole torus is taken by a pin: no free box.
        let mut pins = Pins::new();
        decide(&policy, &job(&TEST_JOB), &mut pins, now).unwrap();
        let busy = decide(&policy, &job(&TEST_JOB), &mut pins, now).unwrap_err();
        assert_eq!(busy.code() as u32, sys::ESLURM_CAN_NOT_START_IMMEDIATELY);
        std::fs::write(&policy, "topology: torus.yaml\ncolour: blue\n").unwrap();
        assert_eq!(code(&TEST_JOB, None, None), sys::ESLURM_INTERNAL);
    }

    #[test]
    fn rejections_read_well() {
        let dir = policy_dir(
            "submit-rej",
            "on_no_placement: reject\nfree_nodes_file: free\n",
        );
        let policy = dir.join("policy.yaml");
        let mut pins = Pins::new();
        let now = SystemTime::now();
        let msg = |j: &JobRequest, pins: &mut Pins| {
            decide(&policy, j, pins, now).unwrap_err().to_string()
        };
        assert!(msg(
            &job(&["_SLURM_SPANK_OPTION_spares_spares=3D(4,1)"]),
            &mut pins
        )
        .starts_with("spares: invalid --spares=3D(4,1): r = 4 must be between 1 and q = 3"));
        let mut j = job(&TEST_JOB);
        j.req_nodes = Some(UserText::Text("other01".into()));
        assert!(msg(&j, &mut pins)
            .contains("--nodelist names other01, not a node of the torus-4x4x2 network"));
        let mut j = job(&TEST_JOB);
        j.min_nodes = Some(40);
        assert!(msg(&j, &mut pins).contains("-N 40 does not match --job-shape=3x3x2"));
        // No free-node file: placed; then the same box is pinned and a second job is refused.
        let j = job(&TEST_JOB);
        assert!(decide(&policy, &j, &mut pins, now).is_ok());
        let m = msg(&j, &mut pins);
        assert!(m.starts_with("spares: no free 4x4x2 box"), "{m}");
        // A policy with an error names its file.
        std::fs::write(&policy, "topology: torus.yaml\nmax_fraction: [\n").unwrap();
        let m = msg(&j, &mut pins);
        assert!(
            m.starts_with(&format!("spares: policy file {}:", policy.display())),
            "{m}"
        );
    }

    /// A 2x1x1 box (one compute node, 3D(1,1)) on the 4x4x2 torus, whose free-node file puts
    /// node[01-16] in the default partition batch and node[17-32] in second.
    fn partitioned(name: &str, policy_extra: &str) -> std::path::PathBuf {
        let dir = policy_dir(
            name,
            &format!(
                "max_fraction: 0.5\nfree_nodes_file: free\non_no_placement: reject\n{policy_extra}"
            ),
        );
        std::fs::write(
            dir.join("free"),
            "node[01-16] state=free partitions=batch*\nnode[17-32] state=free partitions=second\n",
        )
        .unwrap();
        dir.join("policy.yaml")
    }

    const SMALL_JOB: [&str; 2] = [
        "_SLURM_SPANK_OPTION_spares_spares=3D(1,1)",
        "_SLURM_SPANK_OPTION_spares_job_shape=1x1x1",
    ];

    /// `sbatch -p PARTITION --exclude EXCLUDE --nodelist NODELIST` with spares: the box's
    /// hostlist and what the user reads, or the refusal.
    fn submit_small(
        policy: &Path,
        partition: Option<&str>,
        exclude: Option<&str>,
        nodelist: Option<&str>,
    ) -> Result<(String, String), PluginError> {
        let text = |v: Option<&str>| v.map(|v| UserText::Text(v.to_string()));
        let mut j = job(&SMALL_JOB);
        j.partition = text(partition);
        j.exc_nodes = text(exclude);
        j.req_nodes = text(nodelist);
        match decide(policy, &j, &mut Pins::new(), SystemTime::now())? {
            Change::Pad {
                req_nodes,
                user_message,
                ..
            } => Ok((req_nodes, user_message)),
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn boxes_stay_in_the_job_s_partition_off_excluded_nodes_and_around_its_node_list() {
        // Before: every box started at node01 whatever the partition (Slurm then refused
        // the pin outside partition second), --exclude was ignored and --nodelist refused.
        let policy = partitioned("submit-part", "");
        let boxed = |p, e, n| submit_small(&policy, p, e, n).unwrap().0;
        assert_eq!(boxed(None, None, None), "node[01-02]");
        assert_eq!(boxed(Some("second"), None, None), "node[17-18]");
        assert_eq!(boxed(Some("second"), Some("node17"), None), "node[18-19]");
        assert_eq!(boxed(Some("nosuch,second"), None, None), "node[17-18]");
        assert_eq!(boxed(None, Some("node[01-02] other9"), None), "node[03-04]");
        assert_eq!(boxed(None, None, Some("node06")), "node[05-06]");
        assert_eq!(boxed(Some("second"), None, Some("node24")), "node[23-24]");
        // Both partitions together span the network: nothing to say about partitions.
        let (hosts, message) = submit_small(&policy, Some("batch,second"), None, None).unwrap();
        assert_eq!(hosts, "node[01-02]");
        assert!(
            message.ends_with("the job gets the 2x1x1 box, 2 nodes"),
            "{message}"
        );
        // The box wraps around the x ring to hold node05 and node08.
        assert_eq!(boxed(None, None, Some("node05,node08")), "node08,node05");
        let (_, message) = submit_small(&policy, Some("second"), None, None).unwrap();
        assert!(
            message.ends_with("the job gets the 2x1x1 box, 2 nodes, in partition second"),
            "{message}"
        );
    }

    #[test]
    fn requests_no_box_can_meet_are_refused_saying_why() {
        let policy = partitioned("submit-part-refused", "");
        let refusal = |p, e, n| {
            let e = submit_small(&policy, p, e, n).unwrap_err();
            (e.code() as u32, e.to_string())
        };
        let unavailable = sys::ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE;
        for (p, e, n, code, want) in [
            (Some("second"), None, Some("node06"), unavailable,
             "spares: --nodelist names node06, which is not in partition second (sinfo -N -n node06 shows its partitions)"),
            (None, None, Some("node01,node11"), unavailable,
             "spares: no 2x1x1 box of the torus-4x4x2 network holds all of --nodelist node[01,11]: they are too far apart"),
            (None, None, Some("node[01-03]"), unavailable,
             "spares: --nodelist names 3 nodes, more than the job's 2x1x1 box of 2 holds"),
            (Some("second"), Some("node[17-32]"), None, unavailable,
             "spares: every 2x1x1 box in partition second has --exclude'd nodes (node[17-32]); exclude fewer nodes"),
            (None, Some("node[02,04]"), Some("node03"), unavailable,
             "spares: every 2x1x1 box in the default partition batch that holds --nodelist node03 has --exclude'd nodes (node[02,04])"),
            // Without -p the default partition batch (node[01-16]) rules, not the network.
            (None, Some("node[01-16]"), None, unavailable,
             "spares: every 2x1x1 box in the default partition batch has --exclude'd nodes (node[01-16])"),
            (Some("nosuch"), None, None, unavailable,
             "spares: partition nosuch has no node of the torus-4x4x2 network"),
            (None, Some("node01"), Some("node01"), sys::ESPANK_BAD_ARG,
             "spares: --nodelist and --exclude both name node01; drop it from one of them"),
            (Some("a,,b"), None, None, sys::ESPANK_BAD_ARG,
             "spares: --partition=a,,b has an empty partition name"),
            (None, Some("node[01-"), None, sys::ESPANK_BAD_ARG, "spares: --exclude=node[01-: "),
        ] {
            let (c, m) = refusal(p, e, n);
            assert!(m.starts_with(want), "{p:?} {e:?} {n:?}: {m}");
            assert_eq!(c, code, "{m}");
        }
        // Nothing free in the partition around the node list: busy, by the policy's rule.
        std::fs::write(
            policy.with_file_name("free"),
            "node[01-16] state=busy partitions=batch*\nnode[17-32] state=free partitions=second\n",
        )
        .unwrap();
        let (c, m) = refusal(None, None, Some("node06"));
        assert_eq!(c, sys::ESLURM_CAN_NOT_START_IMMEDIATELY, "{m}");
        assert!(m.starts_with("spares: no free 2x1x1 box holding --nodelist in the default partition batch (16 nodes busy or down)"), "{m}");
    }

    #[test]
    fn user_texts_over_the_site_s_limits_are_refused_before_they_are_read() {
        let policy = partitioned(
            "submit-part-limits",
            "limits: {max_request_bytes: 16, max_request_partitions: 2, max_nodes: 8}\n",
        );
        let refused = |j: JobRequest| {
            decide(&policy, &j, &mut Pins::new(), SystemTime::now())
                .unwrap_err()
                .to_string()
        };
        let mut j = job(&SMALL_JOB);
        j.req_nodes = Some(UserText::Text("node01,node02,node03".into()));
        assert!(refused(j).contains("--nodelist is longer than 16 bytes, the limit of this cluster (limits.max_request_bytes"));
        // Longer than the plugin copies from the job descriptor at all.
        let mut j = job(&SMALL_JOB);
        j.exc_nodes = Some(UserText::TooLong);
        assert!(refused(j).contains("--exclude is longer than 16 bytes"));
        let mut j = job(&SMALL_JOB);
        j.partition = Some(UserText::Text("a,b,c".into()));
        assert!(refused(j).contains(
            "--partition names 3 partitions, over the limit of 2 (limits.max_request_partitions"
        ));
        // A short expression naming a billion hosts is counted, never expanded.
        let mut j = job(&SMALL_JOB);
        j.exc_nodes = Some(UserText::Text("n[0-999][0-999]".into()));
        let m = refused(j);
        assert!(m.contains("--exclude names more than 8 nodes, the most a job's box may have here (limits.max_nodes"), "{m}");
    }
}
