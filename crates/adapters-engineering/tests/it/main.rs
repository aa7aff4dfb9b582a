//! The engineering tool servers against the real programs, in their real sandboxes; textbook
//! answers are the oracle.

mod cad_tools;
mod fea_physics;
mod host_call;
mod kicad_tools;
mod spice_physics;
