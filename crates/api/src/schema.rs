//! Hand-written OpenAPI schemas for what the derive cannot say.

use utoipa::openapi::schema::{Object, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;

/// An environment map: names neither empty nor containing `=` or NUL, values without NUL
/// (the server's check: execve cannot carry a NUL).
pub fn env_map() -> Object {
    ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::from_iter([
            Type::Object,
            Type::Null,
        ]))
        .additional_properties(Some(RefOr::T(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[^\\x00]*$"))
                .build(),
        ))))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[^=\\x00]+$"))
                .build(),
        ))
        .build()
}

/// A metadata map as the server's `extract::metadata` takes it: at most 64 keys of 1 to 256
/// characters, values of at most 4096 (the server counts bytes, and at most 32 KiB in all, so
/// long multi-byte keys and values are refused sooner than this says).
pub fn metadata_map() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .max_properties(Some(64))
        .additional_properties(Some(RefOr::T(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(4096))
                .build(),
        ))))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(256))
                .build(),
        ))
        .build()
}

/// `memory_mb` of a database: a size tier's memory, MiB (1024, 4096 or 16384), or `null`.
pub fn tier_memory() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
        .description(Some(
            "MiB; a size tier's memory (1024, 4096 or 16384), agreeing with `size` if both are given.",
        ))
        .enum_values(Some([
            serde_json::json!(1024),
            serde_json::json!(4096),
            serde_json::json!(16384),
            serde_json::Value::Null,
        ]))
        .build()
}

/// A field of the wire contract this server does not support: only `null` (or absent).
pub fn unsupported() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Null)
        .description(Some(
            "Point-in-time clone from archived WAL: not supported by this server; only null.",
        ))
        .build()
}
