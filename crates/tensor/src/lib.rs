//! kvad-tensor
