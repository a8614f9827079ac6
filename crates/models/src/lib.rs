//! kvad-models
