//! Every traffic engine gives the same campaign results, figure for figure.
//!
//! The simulator's engines differ only in speed: the JSON of a campaign's results must be the
//! same byte for byte whichever engine ran it, on meshes and tori, for every stencil and every
//! substitution method (the least-load 0D rule reads the loads to choose, so a wrong load
//! changes the choices too), on any thread count, and when run as shards and merged.

use topology::simulate::{Campaign, CampaignInfo, Engine, Results, Shard};
use topology::sliding::Method;
use topology::{Pattern, Plan, SpareMap, SpareShape};

/// The engine the others are measured against on every method: the previous incremental
/// engine. It is itself checked against full recomputation, which cannot run the least-load
/// 0D rule (that rule reads the tracked loads), on every other method.
const BASELINE: Engine = Engine::Reference;

/// The engines under test.
const ENGINES: [Engine; 1] = [Engine::Incremental];

/// One campaign shape: box, spare shape, box rings, network rings (empty: the box's own),
/// pattern, periodic stencil, methods, failures, samples.
struct Case {
    box_extents: &'static [u32],
    spares: &'static str,
    wrap: &'static [bool],
    rings: &'static [u32],
    pattern: &'static str,
    periodic: bool,
    methods: &'static [&'static str],
    failures: u32,
    samples: u64,
}

const METHODS_2D: &[&str] = &[
    "hybrid",
    "hybrid(-2D)",
    "0D",
    "1D",
    "2D",
    "0D:least-load",
    "hybrid:least-load",
    "0D:alternate",
];

const METHODS_3D: &[&str] = &[
    "hybrid",
    "hybrid(-2D)",
    "0D",
    "1D",
    "2D",
    "3D",
    "hybrid:least-load",
    "hybrid(3D+1D+0D):alternate",
];

const CASES: &[Case] = &[
    Case {
        box_extents: &[6, 6],
        spares: "2D(2,1)",
        wrap: &[false, false],
        rings: &[],
        pattern: "5p",
        periodic: false,
        methods: METHODS_2D,
        failures: 11,
        samples: 40,
    },
    Case {
        box_extents: &[8, 7],
        spares: "2D(2,1)",
        wrap: &[false, false],
        rings: &[],
        pattern: "9p",
        periodic: true,
        methods: METHODS_2D,
        failures: 8,
        samples: 30,
    },
    // A torus: routes take the shorter way round.
    Case {
        box_extents: &[7, 6],
        spares: "2D(2,1)",
        wrap: &[true, true],
        rings: &[],
        pattern: "9p",
        periodic: true,
        methods: METHODS_2D,
        failures: 8,
        samples: 30,
    },
    Case {
        box_extents: &[6, 6, 6],
        spares: "3D(2,1)",
        wrap: &[false, false, false],
        rings: &[],
        pattern: "7p",
        periodic: false,
        methods: METHODS_3D,
        failures: 30,
        samples: 12,
    },
    Case {
        box_extents: &[5, 5, 4],
        spares: "3D(2,1)",
        wrap: &[true, true, true],
        rings: &[],
        pattern: "27p",
        periodic: true,
        methods: METHODS_3D,
        failures: 20,
        samples: 8,
    },
    // A box on part of its network rings: routes may leave the box.
    Case {
        box_extents: &[6, 5, 4],
        spares: "3D(2,1)",
        wrap: &[false, false, true],
        rings: &[9, 8, 4],
        pattern: "7p",
        periodic: true,
        methods: &["hybrid", "0D:least-load", "1D"],
        failures: 20,
        samples: 10,
    },
    // Lines of 17 to 32 nodes, then longer ones: a 0D move's far routes are listed as runs
    // of 32 links, then link by link (`Changes::route`; on the boxes above, runs of 16).
    Case {
        box_extents: &[24, 6, 4],
        spares: "3D(2,1)",
        wrap: &[false, false, false],
        rings: &[],
        pattern: "7p",
        periodic: false,
        methods: &["hybrid", "0D"],
        failures: 40,
        samples: 6,
    },
    Case {
        box_extents: &[40, 5],
        spares: "2D(2,1)",
        wrap: &[false, false],
        rings: &[],
        pattern: "5p",
        periodic: false,
        methods: &["hybrid", "0D"],
        failures: 30,
        samples: 6,
    },
    // The seeds' box, on fewer failures and samples.
    Case {
        box_extents: &[12, 12, 12],
        spares: "3D(2,1)",
        wrap: &[false, false, false],
        rings: &[],
        pattern: "7p",
        periodic: false,
        methods: &["hybrid", "hybrid(-2D)", "0D:least-load"],
        failures: 80,
        samples: 3,
    },
];

fn campaign(case: &Case, engine: Engine) -> Campaign {
    campaign_of(case, engine, case.methods)
}

fn campaign_of(case: &Case, engine: Engine, methods: &[&str]) -> Campaign {
    let shape = SpareShape::parse(case.spares).unwrap();
    let plan = Plan::for_box(case.box_extents, Some(&shape)).unwrap();
    let mut map = SpareMap::from_plan(&plan, case.wrap).unwrap();
    if !case.rings.is_empty() {
        map.set_rings(case.rings).unwrap();
    }
    let q = map.grid().dims();
    let keep_at = vec![1, case.failures / 2, case.failures];
    Campaign {
        pattern: Pattern::parse(case.pattern, q).unwrap(),
        periodic: case.periodic,
        methods: methods
            .iter()
            .map(|m| Method::parse(m, q).unwrap())
            .collect(),
        failures: case.failures,
        engine,
        keep_worst: 4,
        keep_at: keep_at.clone(),
        info: CampaignInfo {
            topology: None,
            spares: case.spares.into(),
            box_extents: case.box_extents.to_vec(),
            wrap: case.wrap.to_vec(),
            compute: map.compute().to_vec(),
            pattern: case.pattern.into(),
            periodic: case.periodic,
            failures: case.failures,
            samples: case.samples,
            seed: 5,
            exhaustive: false,
            keep_worst: 4,
            keep_at,
            remap: None,
        },
        map,
    }
}

fn json(r: &Results) -> String {
    serde_json::to_string(r).unwrap()
}

/// The campaign run as `count` shards, on `threads` threads each, merged.
fn sharded(c: &Campaign, count: u32, threads: usize) -> Results {
    let mut merged: Option<Results> = None;
    for index in (0..count).rev() {
        let r = c.run(Shard { index, count }, threads, None).unwrap();
        match merged.as_mut() {
            Some(m) => m.merge(&r).unwrap(),
            None => merged = Some(r),
        }
    }
    merged.unwrap()
}

#[test]
fn every_engine_gives_the_baselines_json() {
    for case in CASES {
        let label = format!(
            "{:?} {} {} periodic={} rings={:?}",
            case.box_extents, case.wrap[0], case.pattern, case.periodic, case.rings
        );
        let baseline = json(&campaign(case, BASELINE).run(Shard::ALL, 1, None).unwrap());
        let r: Results = serde_json::from_str(&baseline).unwrap();
        let recomputed: Vec<&str> = case
            .methods
            .iter()
            .copied()
            .filter(|m| !m.contains("least-load"))
            .collect();
        let full = campaign_of(case, Engine::Full, &recomputed)
            .run(Shard::ALL, 1, None)
            .unwrap();
        for m in &full.methods {
            let same = r.methods.iter().find(|b| b.method == m.method).unwrap();
            assert_eq!(
                serde_json::to_string(m).unwrap(),
                serde_json::to_string(same).unwrap(),
                "{label}: {} recomputed in full",
                m.method
            );
        }
        // The campaign must exercise what it claims: jobs alive at the end, collisions, and
        // substitutions of more than one degree.
        let last = r.methods[0].steps.last().unwrap();
        assert!(last.alive > 0, "{label}: every job was lost");
        assert!(last.worst().unwrap() > 1, "{label}: no collision at all");
        for engine in ENGINES {
            let c = campaign(case, engine);
            assert_eq!(
                json(&c.run(Shard::ALL, 1, None).unwrap()),
                baseline,
                "{label}: {engine:?} on one thread"
            );
            assert_eq!(
                json(&c.run(Shard::ALL, 3, None).unwrap()),
                baseline,
                "{label}: {engine:?} on three threads"
            );
        }
        let single = json(&campaign(case, ENGINES[0]).run(Shard::ALL, 1, None).unwrap());
        let single: Results = serde_json::from_str(&single).unwrap();
        // Merged shards name every shard; the figures are the single run's.
        let mut merged = sharded(&campaign(case, ENGINES[0]), 3, 2);
        assert_eq!(merged.shards, vec![0, 1, 2], "{label}");
        merged.shards = single.shards.clone();
        merged.shard_count = single.shard_count;
        assert_eq!(json(&merged), json(&single), "{label}: three shards merged");
    }
}

/// The seeds' campaign shape exercises every degree of hybrid, so a difference in any kind
/// of substitution shows.
#[test]
fn the_seeds_campaign_uses_every_degree() {
    let case = CASES.last().unwrap();
    let r = campaign(case, ENGINES[0]).run(Shard::ALL, 1, None).unwrap();
    let hybrid = &r.methods[0];
    let cumulative = hybrid.cumulative_selection(case.failures as usize);
    assert!(
        cumulative.iter().all(|&share| share > 0.0),
        "hybrid used {cumulative:?}"
    );
}
