//! What job_submit does with a new job, as plain Rust: read the options, ask the policy,
//! place the box, and say how to change the job (or why to reject it). The plugin shell only
//! copies fields in and out of `job_desc_msg_t`.

use std::path::Path;
use std::time::SystemTime;

use topology::grid::{format_coord, format_shape};

use crate::dead_at_start;
use crate::error::PluginError;
use crate::ffi::UserText;
use crate::job_env::{option_env_name, SparesOptions, DEAD_AT_START};
use crate::place::{self, NodeRequest, Pins};
use crate::policy::{self, Decision, JobFacts, Refusal, RefusalKind};
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
        /// The partition to set: the policy's first `partitions:` entry for a job without
        /// `--partition`.
        partition: Option<String>,
        /// `spank_job_env` entries to set: the spare shape and compute shape decided here
        /// (`auto` resolved, the shape derived from `-N`), as the options the job's prolog
        /// reads, so every node builds the same map whatever the policy says by then.
        decision: Vec<(String, String)>,
        /// One line for slurmctld's log.
        summary: String,
        /// What the user reads at submission (sbatch prints it).
        user_message: String,
    },
    /// Slurm's `topology/torus3d` places it (`placement: native`): pad it to exactly the
    /// placement `nodes`, leave its node list alone, write the decision as for `Pad`.
    PadNative(crate::native::NativePad),
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
    let site_partition = site_partition(&policy, job.partition.as_ref()).map_err(reject)?;
    // Native placement: Slurm places the box (it honours --nodelist/--exclude itself).
    if crate::native::slurm_places(&policy) {
        return crate::native::pad(&policy, &plan, &method, auto_reason.as_deref())
            .map(|mut pad| {
                if let Some(p) = &site_partition {
                    pad.user_message.push_str(&format!(", in partition {p}"));
                }
                pad.partition = site_partition;
                Change::PadNative(pad)
            })
            .map_err(reject);
    }
    let site_partition_text = site_partition.clone().map(UserText::Text);
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
        site_partition_text.as_ref().or(job.partition.as_ref()),
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
    );
    // No box of free nodes: one with a few unusable nodes, dead at start, if the policy says so.
    let dead_start = match (&placed, free.as_ref()) {
        (Ok(p), Some(f)) if p.waits => dead_at_start::place(
            &policy, &plan, &method, f, &pinned, &request,
        )
        .unwrap_or_else(|why| {
            log::debug!("no box with dead nodes at start: {}", why.0);
            None
        }),
        (Err(busy), Some(f)) if busy.1 == RefusalKind::Busy => {
            match dead_at_start::place(&policy, &plan, &method, f, &pinned, &request) {
                Ok(found) => found,
                Err(why) => {
                    return Err(reject(Refusal(
                        format!(
                            "{}; no box with up to {} unusable nodes can start either: {}",
                            busy.0, policy.max_unusable_nodes_at_start, why.0
                        ),
                        RefusalKind::Busy,
                    )))
                }
            }
        }
        _ => None,
    };
    let mut dead_hostlist = String::new();
    let mut box_nodes = box_nodes;
    let placed = match dead_start {
        Some(d) => {
            dead_hostlist = d.dead_hostlist;
            // The dead nodes are nodes of the box: fewer than box_nodes.
            box_nodes -= d.dead as u32;
            place::Placement {
                origin: d.origin,
                hosts: d.hosts,
                hostlist: d.hostlist,
                waits: false,
            }
        }
        None => placed.map_err(reject)?,
    };
    let nodes: Vec<u32> = placed
        .hosts
        .iter()
        .filter_map(|h| policy.topology.node(h))
        .collect();
    pins.add(now, nodes);
    let summary =
        format!(
        "spares {}{} job-shape {} method {}: box {} at {} ({} nodes, {} spares){}, req_nodes {}{}",
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
        placed.hostlist,
        if dead_hostlist.is_empty() {
            String::new()
        } else {
            format!(", dead at start {dead_hostlist}")
        }
    );
    let name = |o: &str| option_env_name(crate::SPANK_PLUGIN_NAME, o);
    let decision = vec![
        (name("spares"), plan.spares.clone()),
        (name("job-shape"), format_shape(&plan.compute)),
        // Always written, so an entry the user put there never names dead nodes.
        (name(DEAD_AT_START), dead_hostlist.clone()),
    ];
    let user_message = format!(
        "{}: {} compute nodes as a {} grid, spares {}{}: the job gets the {} box, {box_nodes} nodes{}{}{}",
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
            .unwrap_or_default(),
        if dead_hostlist.is_empty() {
            String::new()
        } else {
            format!(
                "; {dead_hostlist} of the box cannot be used (down or drained): the map treats them as failed before the job starts and puts spares in their place"
            )
        }
    );
    Ok(Change::Pad {
        nodes: box_nodes,
        req_nodes: placed.hostlist,
        partition: site_partition,
        decision,
        summary,
        user_message,
    })
}

/// The site's partitions for jobs with spares (`partitions:` of the policy): the partition to
/// set on a job that names none, nothing to change for a job in one of them, a refusal for a
/// job that names another.
fn site_partition(
    policy: &crate::policy::Policy,
    given: Option<&UserText>,
) -> Result<Option<String>, Refusal> {
    let Some(first) = policy.partitions.first() else {
        return Ok(None);
    };
    let list = match given {
        Some(UserText::Text(s)) if s.len() <= policy.limits.max_request_bytes => s.trim(),
        Some(_) => {
            return Err(Refusal::options(format!(
                "--partition is longer than {} bytes, the limit of this cluster (limits.max_request_bytes of the site policy)",
                policy.limits.max_request_bytes
            )))
        }
        None => "",
    };
    if list.is_empty() {
        return Ok(Some(first.clone()));
    }
    let names = list.split(',').map(str::trim);
    if names.clone().count() > policy.limits.max_request_partitions {
        return Err(Refusal::options(format!(
            "--partition names more than {} partitions, the limit of this cluster (limits.max_request_partitions of the site policy)",
            policy.limits.max_request_partitions
        )));
    }
    let others: Vec<&str> = names
        .filter(|n| !policy.partitions.iter().any(|p| p == n))
        .collect();
    if others.is_empty() {
        return Ok(None);
    }
    Err(Refusal::unavailable(format!(
        "jobs with spares run in {} {} on this cluster (the site policy's partitions), not in {}: submit with -p {first}, or without -p",
        if policy.partitions.len() == 1 { "partition" } else { "partitions" },
        policy.partitions.join(", "),
        // The user's text, escaped and cut short: a name may be 64 KiB.
        others
            .iter()
            .take(3)
            .map(|o| o.escape_default().take(64).collect::<String>())
            .collect::<Vec<_>>()
            .join(", "),
    )))
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
            &dir.path().join("policy.yaml"),
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
        let c = decide(
            &dir.path().join("policy.yaml"),
            &j,
            &mut pins,
            SystemTime::now(),
        )
        .unwrap();
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
                (
                    "_SLURM_SPANK_OPTION_spares_dead_at_start".to_string(),
                    String::new()
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
        let p = policy::cached(&dir.path().join("policy.yaml")).unwrap();
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
        let policy = dir.path().join("policy.yaml");
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
        let policy = dir.path().join("policy.yaml");
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
    /// node[01-16] in the default partition batch and node[17-32] in second: the directory
    /// and its policy file.
    fn partitioned(name: &str, policy_extra: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = policy_dir(
            name,
            &format!(
                "max_fraction: 0.5\nfree_nodes_file: free\non_no_placement: reject\n{policy_extra}"
            ),
        );
        std::fs::write(
            dir.path().join("free"),
            "node[01-16] state=free partitions=batch*\nnode[17-32] state=free partitions=second\n",
        )
        .unwrap();
        let policy = dir.path().join("policy.yaml");
        (dir, policy)
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
    fn jobs_with_spares_go_to_the_site_s_partitions() {
        // Before: a job without -p went to Slurm's default partition (batch here) whatever
        // the policy, and a job in any partition was placed.
        let (_dir, policy) = partitioned("submit-site-partitions", "partitions: [second]\n");
        let submit = |p: Option<&str>| {
            let mut j = job(&SMALL_JOB);
            j.partition = p.map(|v| UserText::Text(v.to_string()));
            decide(&policy, &j, &mut Pins::new(), SystemTime::now())
        };
        let Change::Pad {
            req_nodes,
            partition,
            user_message,
            ..
        } = submit(None).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (req_nodes.as_str(), partition.as_deref()),
            ("node[17-18]", Some("second"))
        );
        assert!(
            user_message.ends_with("2 nodes, in partition second"),
            "{user_message}"
        );
        // Named: left as it is.
        let Change::Pad { partition, .. } = submit(Some("second")).unwrap() else {
            panic!()
        };
        assert_eq!(partition, None);
        for (given, other) in [
            ("batch", "batch"),
            ("second,batch", "batch"),
            ("x\ty", "x\\ty"),
        ] {
            let e = submit(Some(given)).unwrap_err();
            assert_eq!(
                e.code() as u32,
                crate::sys::ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE
            );
            assert_eq!(
                e.to_string(),
                format!("spares: jobs with spares run in partition second on this cluster (the site policy's partitions), not in {other}: submit with -p second, or without -p")
            );
        }
        let long = format!("{},{}", "y".repeat(70_000), "second");
        let e = submit(Some(&long)).unwrap_err().to_string();
        assert!(e.contains("longer than 65536 bytes"), "{e}");
        let e = submit(Some(&format!("{},b,c,d", "y".repeat(9000))))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("not in {}, b, c: submit", "y".repeat(64))),
            "{e}"
        );
        let e = submit(Some(&vec!["second"; 65].join(","))).unwrap_err();
        assert!(e.to_string().contains("more than 64 partitions"), "{e}");
        // Jobs without spares are not the plugin's: untouched.
        let mut j = job(&[]);
        j.partition = Some(UserText::Text("batch".into()));
        assert_eq!(
            decide(&policy, &j, &mut Pins::new(), SystemTime::now()).unwrap(),
            Change::Untouched
        );
    }

    #[test]
    fn boxes_stay_in_the_job_s_partition_off_excluded_nodes_and_around_its_node_list() {
        // Before: every box started at node01 whatever the partition (Slurm then refused
        // the pin outside partition second), --exclude was ignored and --nodelist refused.
        let (_dir, policy) = partitioned("submit-part", "");
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
        let (_dir, policy) = partitioned("submit-part-refused", "");
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
    fn a_box_with_unusable_nodes_starts_with_them_dead_when_the_policy_allows_it() {
        // The test job's box is the whole torus; node01 and node06 are down.
        let setup = |name: &str, extra: &str| {
            let dir = policy_dir(name, "");
            let policy = dir.path().join("policy.yaml");
            std::fs::write(
                &policy,
                format!(
                    "topology: torus.yaml\nfree_nodes_file: free\non_no_placement: reject\nstate_dir: {}\n{extra}",
                    dir.path().join("state").display()
                ),
            )
            .unwrap();
            std::fs::write(
                dir.path().join("free"),
                "node[02-05,07-32] state=free\nnode[01,06] state=unusable\n",
            )
            .unwrap();
            (dir, policy)
        };
        let submit =
            |policy: &Path| decide(policy, &job(&TEST_JOB), &mut Pins::new(), SystemTime::now());
        // Today's behaviour without the setting: no free box.
        let e = submit(&setup("submit-dead-off", "").1).unwrap_err();
        assert_eq!(
            e.code() as u32,
            sys::ESLURM_CAN_NOT_START_IMMEDIATELY,
            "{e}"
        );
        assert!(
            e.to_string().starts_with("spares: no free 4x4x2 box"),
            "{e}"
        );
        // One unusable node allowed, two in the box: still none.
        let e =
            submit(&setup("submit-dead-one", "max_unusable_nodes_at_start: 1\n").1).unwrap_err();
        assert_eq!(
            e.code() as u32,
            sys::ESLURM_CAN_NOT_START_IMMEDIATELY,
            "{e}"
        );
        let (_dir, policy) = setup("submit-dead-two", "max_unusable_nodes_at_start: 2\n");
        let Change::Pad {
            nodes,
            req_nodes,
            decision,
            summary,
            user_message,
            ..
        } = submit(&policy).unwrap()
        else {
            panic!()
        };
        assert_eq!(nodes, 30);
        assert_eq!(req_nodes, "node[02-05,07-32]");
        assert!(
            decision.contains(&(
                "_SLURM_SPANK_OPTION_spares_dead_at_start".to_string(),
                "node[01,06]".to_string()
            )),
            "{decision:?}"
        );
        assert!(
            summary.ends_with(", dead at start node[01,06]"),
            "{summary}"
        );
        assert_eq!(
            user_message,
            "spares: 18 compute nodes as a 3x3x2 grid, spares 3D(2,1): the job gets the 4x4x2 box, 30 nodes; node[01,06] of the box cannot be used (down or drained): the map treats them as failed before the job starts and puts spares in their place"
        );
        // The job's nodes build the map from the decision: the two are dead, ranks elsewhere.
        let prolog_env: Vec<String> = decision
            .iter()
            .map(|(k, v)| format!("SPANK_{k}={v}"))
            .collect();
        let req = SparesOptions::from_prolog_env(&prolog_env)
            .validate()
            .unwrap();
        let dead = crate::job_env::dead_at_start_from_prolog_env(&prolog_env);
        let p = policy::cached(&policy).unwrap();
        let m = crate::jobmap::build(&p, &req, 5, &req_nodes, dead.as_deref(), "node02")
            .unwrap()
            .unwrap();
        assert_eq!(m.doc.failed.len(), 2);
        assert!(!m.rank_hosts.iter().any(|h| h == "node01" || h == "node06"));
    }

    #[test]
    fn a_box_whose_unusable_nodes_the_spares_cannot_cover_is_refused_saying_so() {
        // 3D(1,1) on 1x1x1: 2x1x1 boxes of one spare. Every box in row y=0 of z=0 but the
        // last holds two down nodes.
        let dir = policy_dir(
            "submit-dead-cover",
            "max_fraction: 0.5\nfree_nodes_file: free\non_no_placement: reject\nmax_unusable_nodes_at_start: 2\n",
        );
        std::fs::write(dir.path().join("free"), "node[01-32] state=unusable\n").unwrap();
        let e = decide(
            &dir.path().join("policy.yaml"),
            &job(&SMALL_JOB),
            &mut Pins::new(),
            SystemTime::now(),
        )
        .unwrap_err();
        assert_eq!(
            e.code() as u32,
            sys::ESLURM_CAN_NOT_START_IMMEDIATELY,
            "{e}"
        );
        assert!(
            e.to_string().ends_with("; no box with up to 2 unusable nodes can start either: 2 dead nodes at start, more than the 1 spare nodes of spares 3D(1,1)"),
            "{e}"
        );
    }

    #[test]
    fn user_texts_over_the_site_s_limits_are_refused_before_they_are_read() {
        let (_dir, policy) = partitioned(
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
