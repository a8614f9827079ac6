//! kvad-hub
