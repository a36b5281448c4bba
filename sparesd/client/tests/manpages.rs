//! `sparesctl generate`: the man pages (with EXAMPLES and EXIT STATUS) and completions the
//! package installs.

use std::process::Command;

#[test]
fn sparesctl_man_pages_have_examples_and_exit_status_and_completions_exist() {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_sparesctl");
    let man = dir.path().join("man");
    let st = Command::new(bin)
        .args(["generate", "man"])
        .arg(&man)
        .status()
        .unwrap();
    assert!(st.success());
    let top = std::fs::read_to_string(man.join("sparesctl.1")).unwrap();
    assert!(top.contains(".SH EXAMPLES"), "{top}");
    assert!(top.contains("sparesctl map 4242 \\-\\-hostfile"), "{top}");
    assert!(top.contains(".SH \"EXIT STATUS\""), "{top}");
    assert!(top.contains("no_spare_left"), "{top}");
    let map = std::fs::read_to_string(man.join("sparesctl-map.1")).unwrap();
    assert!(
        map.contains(".SH EXAMPLES") && map.contains(".SH \"EXIT STATUS\""),
        "{map}"
    );
    assert!(
        !man.join("sparesctl-generate.1").exists(),
        "generate is hidden"
    );
    let compl = dir.path().join("bash");
    let st = Command::new(bin)
        .args(["generate", "completions", "bash"])
        .arg(&compl)
        .status()
        .unwrap();
    assert!(st.success());
    let script = std::fs::read_to_string(compl.join("sparesctl")).unwrap();
    assert!(
        script.contains("node-down") && script.contains("--hostfile"),
        "{script}"
    );
    // Not a word of --help.
    let help = Command::new(bin).arg("--help").output().unwrap();
    assert!(!String::from_utf8_lossy(&help.stdout).contains("generate"));
}
