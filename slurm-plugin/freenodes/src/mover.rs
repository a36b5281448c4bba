//! Pending spares jobs stay placeable: a job pinned (by job_submit) to a box that now holds
//! an unusable node is moved to a box of the same extents without one, preferably an
//! entirely free box. A job whose box is only busy stays: it starts when the box frees, and
//! moving held or queued jobs the user watches would surprise more than it helps. Boxes
//! come from the model ([`placement::find_box`]), within the job's partitions, never on its
//! `--exclude`d nodes nor on nodes another pending job asks for. Only jobs marked by
//! job_submit ([`pin_mark`], in `admin_comment`, which users cannot set) whose `ReqNodeList`
//! is still exactly the marked box are touched.

use std::collections::{BTreeMap, HashMap, HashSet};

use topology::{hostlist, pin_mark, placement, Topology};

use crate::slurm::{NodeInfo, NodeState, PendingJob};

/// Most node names expanded from the pending jobs' node lists in one pass (users write them;
/// Slurm checked that each names real nodes, but a queue may hold many).
pub const MAX_EXPANDED_NAMES: usize = 16 << 20;

/// A pending job to pin to another box.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub job: u32,
    pub from: String,
    pub to: String,
    pub why: String,
}

/// What a pass decides for one pinned pending job whose box cannot start it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Move(Move),
    /// Left where it is; `why` is the log line.
    Stay {
        job: u32,
        why: String,
    },
}

struct Budget(usize);

impl Budget {
    /// The topology's nodes an expression names (unknown names left out); `None` when it is
    /// no hostlist or the pass's budget is spent.
    fn nodes(&mut self, topology: &Topology, expr: &str) -> Option<Vec<u32>> {
        let names = hostlist::expand(expr).ok()?;
        self.0 = self.0.checked_sub(names.len())?;
        Some(names.iter().filter_map(|n| topology.node(n)).collect())
    }
}

/// Marks free nodes that a pending job asks for (`ReqNodeList`) as busy: they are not free
/// for a new job.
pub fn mark_requested(
    topology: &Topology,
    nodes: &mut BTreeMap<String, NodeInfo>,
    jobs: &[PendingJob],
) {
    let mut budget = Budget(MAX_EXPANDED_NAMES);
    for job in jobs {
        let Some(expr) = &job.req_nodes else { continue };
        let Ok(names) = hostlist::expand(expr) else {
            continue;
        };
        let Some(left) = budget.0.checked_sub(names.len()) else {
            log::warn!(
                "pending jobs name more than {MAX_EXPANDED_NAMES} nodes; the rest count as free"
            );
            return;
        };
        budget.0 = left;
        for name in names {
            if topology.node(&name).is_none() {
                continue;
            }
            if let Some(info) = nodes.get_mut(&name) {
                info.state = info.state.max(NodeState::Busy);
            }
        }
    }
}

/// A marked job, its box still as marked.
struct Pinned<'a> {
    job: &'a PendingJob,
    hostlist: &'a str,
    extents: Vec<u32>,
    nodes: HashSet<u32>,
}

/// Decides the moves of one pass. `nodes` are sinfo's states (before [`mark_requested`]);
/// `skip` holds jobs moved too recently to move again. At most one move per job, and no two
/// jobs moved onto the same nodes.
pub fn plan(
    topology: &Topology,
    nodes: &BTreeMap<String, NodeInfo>,
    jobs: &[PendingJob],
    skip: &HashSet<u32>,
) -> Vec<Outcome> {
    let mut budget = Budget(MAX_EXPANDED_NAMES);
    // How many pending jobs ask for each node.
    let mut claims: HashMap<u32, u32> = HashMap::new();
    let mut pinned = Vec::new();
    for job in jobs {
        let Some(req) = job.req_nodes.as_deref() else {
            continue;
        };
        let Some(req_nodes) = budget.nodes(topology, req) else {
            continue;
        };
        let req_nodes: HashSet<u32> = req_nodes.into_iter().collect();
        for &n in &req_nodes {
            *claims.entry(n).or_default() += 1;
        }
        let Some(hostlist) = job.admin_comment.as_deref().and_then(pin_mark::parse) else {
            continue;
        };
        let Some(marked) = budget.nodes(topology, hostlist) else {
            continue;
        };
        let marked_set: HashSet<u32> = marked.iter().copied().collect();
        // The user may have changed ReqNodeList since; then the mark no longer holds.
        if marked_set != req_nodes || marked_set.len() != marked.len() {
            continue;
        }
        if let Ok(Some(extents)) = placement::box_of(topology, &marked) {
            pinned.push(Pinned {
                job,
                hostlist,
                extents,
                nodes: marked_set,
            });
        }
    }
    pinned.sort_by_key(|p| p.job.id);

    let state = |n: u32| {
        topology
            .host(n)
            .and_then(|h| nodes.get(h))
            .map_or(NodeState::Busy, |i| i.state)
    };
    let mut out = Vec::new();
    for p in &pinned {
        let job = p.job;
        let unusable = p.nodes.iter().any(|&n| state(n) == NodeState::Unusable);
        if !unusable || skip.contains(&job.id) {
            continue;
        }
        let excluded: HashSet<u32> = match job.exc_nodes.as_deref() {
            Some(e) => match budget.nodes(topology, e) {
                Some(v) => v.into_iter().collect(),
                None => {
                    out.push(Outcome::Stay {
                        job: job.id,
                        why: format!(
                            "job {}: its --exclude list cannot be read; not moved",
                            job.id
                        ),
                    });
                    continue;
                }
            },
            None => HashSet::new(),
        };
        let in_partition = |n: u32| {
            let Some(info) = topology.host(n).and_then(|h| nodes.get(h)) else {
                return false;
            };
            let names = info.partitions.iter().map(|q| q.trim_end_matches('*'));
            if job.partitions.is_empty() {
                info.partitions.iter().any(|q| q.ends_with('*'))
            } else {
                names.clone().any(|q| job.partitions.iter().any(|j| j == q))
            }
        };
        let claimed_by_others = |n: u32| {
            let c = claims.get(&n).copied().unwrap_or(0);
            c > u32::from(p.nodes.contains(&n))
        };
        let eligible = |n: u32| in_partition(n) && !excluded.contains(&n) && !claimed_by_others(n);
        let search = |ok: &dyn Fn(u32) -> bool| {
            placement::find_box(topology, &p.extents, |n| eligible(n) && ok(n))
                .ok()
                .flatten()
        };
        let free_box = search(&|n| state(n) == NodeState::Free);
        let target = match free_box {
            Some(o) => Some((o, "entirely free")),
            None => {
                search(&|n| state(n) != NodeState::Unusable).map(|o| (o, "without unusable nodes"))
            }
        };
        let Some((origin, kind)) = target else {
            out.push(Outcome::Stay {
                job: job.id,
                why: format!(
                    "job {}: box {} holds an unusable node and no {} box without one is in partition {}; left pending there",
                    job.id,
                    p.hostlist,
                    topology::grid::format_shape(&p.extents),
                    job.partitions.join(",")
                ),
            });
            continue;
        };
        let Some(hosts) = topology.box_hosts(&origin, &p.extents) else {
            continue;
        };
        let to = hostlist::compress(&hosts);
        for &n in &p.nodes {
            if let Some(c) = claims.get_mut(&n) {
                *c -= 1;
            }
        }
        for h in &hosts {
            if let Some(n) = topology.node(h) {
                *claims.entry(n).or_default() += 1;
            }
        }
        out.push(Outcome::Move(Move {
            job: job.id,
            from: p.hostlist.to_string(),
            to,
            why: format!("its box holds an unusable node; to a box {kind}"),
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test cluster's 4x4x2 torus: two 4x4x1 boxes, node[01-16] and node[17-32].
    fn torus() -> Topology {
        Topology::from_yaml(
            "name: t\nextents: [4, 4, 2]\nlinks: ring\nnodes: node[01-32]\n",
            "t.yaml",
            None,
        )
        .unwrap()
    }

    fn cluster(states: &[(&str, NodeState)]) -> BTreeMap<String, NodeInfo> {
        let mut nodes: BTreeMap<String, NodeInfo> = (1..=32)
            .map(|i| {
                (
                    format!("node{i:02}"),
                    NodeInfo {
                        state: NodeState::Free,
                        partitions: vec!["torus*".into()],
                    },
                )
            })
            .collect();
        for (name, state) in states {
            nodes.get_mut(*name).unwrap().state = *state;
        }
        nodes
    }

    fn pinned(id: u32, hosts: &str) -> PendingJob {
        PendingJob {
            id,
            partitions: vec!["torus".into()],
            req_nodes: Some(hosts.into()),
            exc_nodes: None,
            admin_comment: Some(pin_mark::format(hosts)),
        }
    }

    fn moves(outcomes: &[Outcome]) -> Vec<(u32, &str)> {
        outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::Move(m) => Some((m.job, m.to.as_str())),
                Outcome::Stay { .. } => None,
            })
            .collect()
    }

    #[test]
    fn a_job_whose_box_lost_a_node_moves_to_a_box_without_one() {
        let t = torus();
        // node01 busy (another job), node02 down; the other box busy too but usable.
        let nodes = cluster(&[
            ("node01", NodeState::Busy),
            ("node02", NodeState::Unusable),
            ("node20", NodeState::Busy),
        ]);
        let out = plan(&t, &nodes, &[pinned(7, "node[01-16]")], &HashSet::new());
        assert_eq!(moves(&out), vec![(7, "node[17-32]")]);
        // Moved at most once per period: a job moved recently stays.
        let out = plan(&t, &nodes, &[pinned(7, "node[01-16]")], &HashSet::from([7]));
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn a_job_stays_with_a_log_line_when_every_box_holds_an_unusable_node() {
        let t = torus();
        let nodes = cluster(&[
            ("node02", NodeState::Unusable),
            ("node18", NodeState::Unusable),
        ]);
        let out = plan(&t, &nodes, &[pinned(7, "node[01-16]")], &HashSet::new());
        assert_eq!(out.len(), 1);
        let Outcome::Stay { job: 7, why } = &out[0] else {
            panic!("{out:?}")
        };
        assert!(
            why.contains("no 4x4x1 box without one is in partition torus"),
            "{why}"
        );
    }

    #[test]
    fn a_job_whose_box_is_only_busy_stays() {
        let t = torus();
        let job = [pinned(7, "node[01-16]")];
        let nodes = cluster(&[("node01", NodeState::Busy)]);
        assert!(plan(&t, &nodes, &job, &HashSet::new()).is_empty());
        let nodes = cluster(&[("node01", NodeState::Busy), ("node17", NodeState::Busy)]);
        assert!(plan(&t, &nodes, &job, &HashSet::new()).is_empty());
    }

    #[test]
    fn two_jobs_are_never_moved_onto_the_same_box() {
        let t = torus();
        let nodes = cluster(&[("node02", NodeState::Unusable)]);
        let jobs = [pinned(8, "node[01-16]"), pinned(7, "node[01-16]")];
        let out = plan(&t, &nodes, &jobs, &HashSet::new());
        assert_eq!(moves(&out), vec![(7, "node[17-32]")]);
        assert!(matches!(&out[1], Outcome::Stay { job: 8, .. }), "{out:?}");
        // Nor onto the box another pending job (spares or not) asks for.
        let other = PendingJob {
            admin_comment: None,
            ..pinned(9, "node20")
        };
        let out = plan(
            &t,
            &nodes,
            &[pinned(7, "node[01-16]"), other],
            &HashSet::new(),
        );
        assert_eq!(moves(&out), vec![]);
    }

    #[test]
    fn only_the_mark_job_submit_wrote_moves_a_job() {
        let t = torus();
        let nodes = cluster(&[("node02", NodeState::Unusable)]);
        // No admin comment (a user's --nodelist job), or a mark naming another box than the
        // job asks for (ReqNodeList changed since), or a node list that is no box.
        let unmarked = PendingJob {
            admin_comment: None,
            ..pinned(1, "node[01-16]")
        };
        let changed = PendingJob {
            req_nodes: Some("node[01-02]".into()),
            ..pinned(2, "node[01-16]")
        };
        let no_box = pinned(3, "node[01-02,05]");
        for job in [unmarked, changed, no_box] {
            assert!(
                plan(&t, &nodes, std::slice::from_ref(&job), &HashSet::new()).is_empty(),
                "{job:?}"
            );
        }
    }

    #[test]
    fn targets_stay_in_the_partition_and_off_excluded_nodes() {
        let t = torus();
        let mut nodes = cluster(&[("node02", NodeState::Unusable)]);
        nodes.get_mut("node30").unwrap().partitions = vec!["other".into()];
        let out = plan(&t, &nodes, &[pinned(7, "node[01-16]")], &HashSet::new());
        assert!(
            matches!(&out[..], [Outcome::Stay { job: 7, .. }]),
            "{out:?}"
        );
        let nodes = cluster(&[("node02", NodeState::Unusable)]);
        let job = PendingJob {
            exc_nodes: Some("node31".into()),
            ..pinned(7, "node[01-16]")
        };
        let out = plan(&t, &nodes, &[job], &HashSet::new());
        assert!(
            matches!(&out[..], [Outcome::Stay { job: 7, .. }]),
            "{out:?}"
        );
    }

    #[test]
    fn requested_free_nodes_are_busy_in_the_file() {
        let t = torus();
        let mut nodes = cluster(&[("node02", NodeState::Unusable)]);
        mark_requested(&t, &mut nodes, &[pinned(7, "node[01-16]")]);
        assert_eq!(nodes["node01"].state, NodeState::Busy);
        assert_eq!(nodes["node02"].state, NodeState::Unusable);
        assert_eq!(nodes["node17"].state, NodeState::Free);
    }
}
