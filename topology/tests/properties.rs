//! Properties of substitution on random failure sequences.

use proptest::prelude::*;
use topology::sliding::{fail, replay, Method, Outcome};
use topology::{Grid, MapDocument, MapMeta, NodeState, Pattern, Plan, SpareMap, SpareShape};

#[derive(Debug, Clone)]
struct Case {
    box_: Vec<u32>,
    wrap: Vec<bool>,
    shape: String,
    method: String,
    failures: Vec<u32>,
}

fn case() -> impl Strategy<Value = Case> {
    (2usize..=3)
        .prop_flat_map(|q| {
            let methods: Vec<String> = {
                let mut v = vec![
                    "hybrid".to_string(),
                    "0D".to_string(),
                    "hybrid(-2D)".to_string(),
                ];
                v.extend((1..=q).map(|k| format!("{k}D")));
                v
            };
            (
                proptest::collection::vec(3u32..7, q),
                proptest::collection::vec(any::<bool>(), q),
                1..=q,
                1u32..=2,
                proptest::sample::select(methods),
                proptest::collection::vec(any::<u32>(), 1..40),
            )
        })
        .prop_map(|(box_, wrap, r, s, method, failures)| Case {
            shape: format!("{}D({r},{s})", box_.len()),
            box_,
            wrap,
            method,
            failures,
        })
}

fn check_consistent(m: &SpareMap) {
    let n = m.grid().len();
    let mut seen = vec![false; n as usize];
    for (rank, &node) in m.rank_nodes().iter().enumerate() {
        assert!(!seen[node as usize], "two ranks on node {node}");
        seen[node as usize] = true;
        match m.state(node) {
            NodeState::Busy(r) => assert_eq!(r as usize, rank),
            NodeState::Dead => assert!(m.is_lost(), "rank {rank} on a dead node of a live job"),
            NodeState::Free => panic!("rank {rank} on a node marked free"),
        }
    }
    let free = (0..n).filter(|&x| m.state(x) == NodeState::Free).count();
    assert_eq!(free, m.free_nodes().len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn substitutions_keep_the_map_sound(c in case()) {
        let q = c.box_.len();
        let shape = SpareShape::parse(&c.shape).unwrap();
        let plan = Plan::for_box(&c.box_, Some(&shape)).unwrap();
        let mut m = SpareMap::from_plan(&plan, &c.wrap).unwrap();
        let method = Method::parse(&c.method, q).unwrap();
        let grid: Grid = *m.grid();
        for raw in c.failures {
            let f = raw % grid.len();
            let before = m.clone();
            match fail(&mut m, f, &method) {
                Err(_) => {
                    prop_assert_eq!(before.state(f), NodeState::Dead);
                    prop_assert_eq!(&m, &before);
                    continue;
                }
                Ok(Outcome::Substituted { degree, moves, slide }) => {
                    prop_assert_eq!(degree > 0, slide.is_some());
                    prop_assert_eq!(moves.iter().filter(|mv| mv.from == f).count(), 1, "the failed rank moves once");
                    for mv in &moves {
                        let hops = grid.distance(&grid.coord(mv.from), &grid.coord(mv.to));
                        if degree > 0 {
                            prop_assert_eq!(hops, 1, "a slide moves each rank by one hop");
                        }
                        prop_assert!(m.state(mv.to) != NodeState::Dead);
                    }
                    // The moves, one after another, turn the old map into the new one.
                    let mut replayed = before.clone();
                    replay(&mut replayed, &moves).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(replayed.rank_nodes(), m.rank_nodes());
                }
                Ok(Outcome::FreeNodeDied) => {
                    prop_assert_eq!(before.state(f), NodeState::Free);
                    prop_assert_eq!(before.rank_nodes(), m.rank_nodes());
                }
                Ok(Outcome::JobLost) => prop_assert!(m.is_lost()),
            }
            prop_assert_eq!(m.state(f), NodeState::Dead);
            check_consistent(&m);
        }
        // The document of the final map reads back to the same map.
        let meta = MapMeta {
            topology: None,
            origin: vec![0; q],
            spares: c.shape.clone(),
            method: method.clone(),
            pattern: Pattern::star(q),
            periodic: false,
            hosts: None,
        };
        let doc = MapDocument::new(&m, &meta);
        let (back, _) = MapDocument::from_json(&doc.to_json()).unwrap().into_map().unwrap();
        prop_assert_eq!(back, m);
    }
}
