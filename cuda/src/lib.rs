//! Skeleton; see the issues.
