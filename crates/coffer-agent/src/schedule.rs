//! docs/design.md#agent
