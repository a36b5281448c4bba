//! Builds `tests/c/client.c` against `include/spares.h` and the built `libspares`, and runs it
//! against a daemon (the sparesd library, serving its real Unix socket on a thread).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use spares_client::Client;
use topology::{Grid, MapDocument, MapMeta, Method, Pattern, SpareMap};

/// The directory cargo put `libspares.so` / `libspares.a` in (beside this test's `deps/`).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for dir in [deps.parent().unwrap(), deps] {
        if dir.join("libspares.so").exists() || dir.join("libspares.a").exists() {
            return dir.to_path_buf();
        }
    }
    panic!("libspares not found near {}", deps.display());
}

fn doc() -> MapDocument {
    let g = Grid::mesh(&[4, 4]).unwrap();
    let m = SpareMap::new(g, &[3, 3], &[0, 0]).unwrap();
    MapDocument::new(
        &m,
        &MapMeta {
            topology: Some("c-test".into()),
            origin: vec![0, 0],
            spares: "2D(1,1)".into(),
            method: Method::hybrid(2),
            pattern: Pattern::star(2),
            periodic: false,
            hosts: Some((0..16).map(|i| format!("cn{i:02}")).collect()),
        },
    )
}

#[test]
fn the_c_header_compiles_and_the_c_client_talks_to_the_daemon() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("sparesd.sock");
    let config = sparesd::Config {
        socket: socket.clone(),
        state_dir: tmp.path().join("state"),
        // Whoever runs the test may register jobs.
        admin_uids: vec![sparesd::sys::euid()],
        ..sparesd::Config::default()
    };
    let _daemon = sparesd::start(config).unwrap();
    let mut c = Client::connect(&socket).unwrap();
    c.register(77, sparesd::sys::euid(), &doc()).unwrap();

    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let built = lib_dir();
    // The program records the soname libspares.so.0 (build.rs), which cargo does not create:
    // link against a private directory holding both names.
    let libdir = tmp.path().join("lib");
    std::fs::create_dir(&libdir).unwrap();
    for name in ["libspares.so", "libspares.so.0"] {
        std::os::unix::fs::symlink(built.join("libspares.so"), libdir.join(name)).unwrap();
    }
    let exe = tmp.path().join("c_client");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(manifest.join("tests/c/client.c"))
        .arg(format!("-I{}", manifest.join("include").display()))
        .arg(format!("-L{}", libdir.display()))
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .arg("-lspares")
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe)
        .arg(&socket)
        .arg("77")
        .arg("cn05")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "C client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("C CLIENT OK"));
    let field = |prefix: &str| -> Value {
        let line = stdout.lines().find_map(|l| l.strip_prefix(prefix)).unwrap();
        serde_json::from_str(line).unwrap()
    };
    let reply = field("REPLY ");
    assert_eq!(reply["outcome"], "substituted");
    assert_eq!(reply, field("AGAIN "), "the same failure, the same answer");
    assert_eq!(field("MAP ")["compute"], serde_json::json!([3, 3]));
    let remap = field("REMAP ");
    assert_eq!(remap["remap"], 1);
    assert_eq!(remap["max_moves"], 4, "{remap}");
    assert!(remap["moved"].as_u64().unwrap() <= 4);
    let show = c.show(77).unwrap();
    assert_eq!(show["history"].as_array().unwrap().len(), 1);
    assert_eq!(show["remaps"].as_array().unwrap().len(), 1);
    assert_eq!(show["map"], remap["map"], "the re-mapped map is the job's");
}
