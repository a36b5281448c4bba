//! Links GCC's unwinder (`libgcc_eh.a`) into the plugin so that `spank_spares.so` does not
//! need `libgcc_s.so.1`: every sbatch, salloc and srun loads this plugin, and loading
//! `libgcc_s` was about 200 us of the 360 us its `dlopen` took (docs/slurm-plugin-notes.md).
//! The panic guard still unwinds: the unwinder is in the plugin, private to it.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .unwrap_or_else(|e| panic!("{cc} -print-file-name=libgcc_eh.a: {e}"));
    let path = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let dir = path
        .parent()
        .filter(|_| path.is_absolute() && path.exists())
        .unwrap_or_else(|| panic!("{cc} does not know where libgcc_eh.a is (gcc installed?)"));
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=static:+whole-archive,-bundle=gcc_eh");
}
