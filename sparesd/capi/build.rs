//! Gives libspares.so the soname libspares.so.0: the Debian package libspares0 ships the
//! library under that name (libspares-dev adds the libspares.so symlink), and programs record
//! the soname at link time, so it must be in the library itself.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libspares.so.0");
}
