//! kvad-engine
