//! `bcd-helper`: the root helper. It runs only the privileged steps bcd needs, for peers it
//! has checked, with arguments it has validated, and audits each one.

#[allow(dead_code)] // wired by the server's main.rs
mod child;
#[allow(dead_code)] // wired by the server's main.rs
mod libvirt;
#[allow(dead_code)] // wired by the server's main.rs
mod sandbox;

fn main() {}
