//! What `man spares` says beyond `--help`: examples and exit statuses (spares-manpage).

/// What `man spares` says beyond `--help` (`spares generate man DIR`).
pub const MAN: manpage::Extra = manpage::Extra {
    section: "1",
    examples: &[
        (
            "The seeds' 12x12x12 network with 3D(2,1) spares: compute shape, spare count.",
            "spares plan --network 12x12x12 --spares 3D:2,1",
        ),
        (
            "A job on the site's topology, its nodes, and its map in a file.",
            "spares plan -t /etc/slurm/spares-topology.yaml --shape 3x3x2 --spares 3D:2,1 --show-nodes -o map.json",
        ),
        (
            "Two nodes fail: each substitution, its moves and the collisions after.",
            "spares substitute --map map.json --fail node06 --fail node11 -o after.json",
        ),
        (
            "Re-map the ranks for fewer collisions, moving at most 50 of them.",
            "spares remap --map after.json --max-moves 50 --time-limit 1 -o remapped.json",
        ),
        (
            "The map after the failures as a SLURM_HOSTFILE.",
            "spares rankfile --map after.json --format hostfile",
        ),
        (
            "Traffic figures of a map for the 7-point stencil.",
            "spares collisions --map after.json --pattern 7p",
        ),
        (
            "A campaign of 10,000 random failure sequences, then its figures.",
            "spares simulate -n 12x12x12 --spares 3D:2,1 -p 7p -m hybrid,0D --samples 10000 -o r12.json",
        ),
        (
            "A campaign that also re-maps each sample's map after 50 and 100 failures, moving at most 50 ranks.",
            "spares simulate -n 12x12x12 --spares 3D:2,1 -p 7p -m hybrid --samples 1000 --remap-at 50,100 --max-moves 50 -o r12-remap.json",
        ),
        (
            "The collisions figure of a campaign as SVG and PNG.",
            "spares plot r12.json --figure collisions -o collisions",
        ),
        ("The size-to-shape table of --spares=auto.", "spares policy"),
    ],
    exit_status: &[
        ("0", "Done."),
        (
            "1",
            "Bad arguments, a file that cannot be read or written, or a model error (the message names the value and the rule).",
        ),
        ("2", "Command-line syntax error (clap)."),
    ],
};
