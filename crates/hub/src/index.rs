//! The model index (filled in below).
