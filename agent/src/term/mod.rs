//! What a person reads on a terminal: one formatter per unit ([`units`]), the aligned table
//! every listing uses ([`table`]) and the colour of the state words ([`colour`]). JSON never
//! passes through here: its fields keep their own names and numbers.

pub mod colour;
pub mod table;
pub mod units;
