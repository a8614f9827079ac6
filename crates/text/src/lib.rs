//! kvad-text
