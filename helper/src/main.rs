//! `bcd-helper`: the root helper. It runs only the privileged steps bcd needs, for peers it
//! has checked, with arguments it has validated, and audits each one.

mod child;

fn main() {}
