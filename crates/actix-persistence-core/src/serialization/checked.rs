//! What serde_json writes but does not read back: NaN and the infinities (written as `null`,
//! which reads back as no `f64`, or as `None` in an `Option<f64>`), and arrays or objects
//! nested deeper than its reader's recursion limit. [`to_json`](super::to_json) refuses both,
//! so a stored event or snapshot always reads back (a persistent actor could never recover past
//! one that does not).

use std::io;

use serde::ser::{self, Serialize, Serializer};

/// The deepest nesting of arrays and objects serde_json's reader accepts: it fails on the
/// 128th (its recursion limit).
pub(crate) const MAX_JSON_DEPTH: usize = 127;

/// serde_json's compact output (the default `Formatter` methods are `CompactFormatter`'s), with
/// a count of the arrays and objects open: one more than [`MAX_JSON_DEPTH`] is an error.
#[derive(Default)]
pub(crate) struct DepthLimited {
    depth: usize,
}

impl DepthLimited {
    fn open<W: ?Sized + io::Write>(&mut self, writer: &mut W, token: &[u8]) -> io::Result<()> {
        self.depth += 1;
        if self.depth > MAX_JSON_DEPTH {
            return Err(too_deep());
        }
        writer.write_all(token)
    }

    fn close<W: ?Sized + io::Write>(&mut self, writer: &mut W, token: &[u8]) -> io::Result<()> {
        self.depth -= 1;
        writer.write_all(token)
    }
}

/// The error of a value nested deeper than serde_json reads back.
fn too_deep() -> io::Error {
    io::Error::other(format!(
        "nested deeper than {MAX_JSON_DEPTH} arrays or objects, which serde_json does not read \
         back (its recursion limit)"
    ))
}

/// How deeply `fragment` (JSON text, as a `serde_json::value::RawValue` holds it) nests arrays
/// and objects: brackets outside strings.
fn nesting_of(fragment: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in fragment.bytes() {
        match (in_string, escaped, byte) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (true, false, _) => {}
            (false, _, b'"') => in_string = true,
            (false, _, b'[' | b'{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, _, b']' | b'}') => depth = depth.saturating_sub(1),
            (false, _, _) => {}
        }
    }
    deepest
}

impl serde_json::ser::Formatter for DepthLimited {
    #[inline]
    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"[")
    }

    #[inline]
    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"]")
    }

    #[inline]
    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"{")
    }

    #[inline]
    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"}")
    }

    /// A `RawValue`'s text is written as it is: its own nesting counts from here.
    fn write_raw_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        if self.depth + nesting_of(fragment) > MAX_JSON_DEPTH {
            return Err(too_deep());
        }
        writer.write_all(fragment.as_bytes())
    }
}

fn not_finite<E: ser::Error>(value: f64) -> E {
    E::custom(format_args!(
        "the float {value} is not finite: serde_json writes it as null, which does not read \
         back as the float"
    ))
}

/// A value serialized with every float checked to be finite, at any depth.
pub(crate) struct Finite<'a, T: ?Sized>(pub(crate) &'a T);

impl<T: ?Sized + Serialize> Serialize for Finite<'_, T> {
    #[inline]
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(FiniteSerializer(serializer))
    }
}

/// Forwards everything to `S`, refusing non-finite floats; compound values hand their elements
/// on wrapped in [`Finite`].
struct FiniteSerializer<S>(S);

impl<S: Serializer> Serializer for FiniteSerializer<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = FiniteSerializer<S::SerializeSeq>;
    type SerializeTuple = FiniteSerializer<S::SerializeTuple>;
    type SerializeTupleStruct = FiniteSerializer<S::SerializeTupleStruct>;
    type SerializeTupleVariant = FiniteSerializer<S::SerializeTupleVariant>;
    type SerializeMap = FiniteSerializer<S::SerializeMap>;
    type SerializeStruct = FiniteSerializer<S::SerializeStruct>;
    type SerializeStructVariant = FiniteSerializer<S::SerializeStructVariant>;

    #[inline]
    fn serialize_bool(self, v: bool) -> Result<S::Ok, S::Error> {
        self.0.serialize_bool(v)
    }
    #[inline]
    fn serialize_i8(self, v: i8) -> Result<S::Ok, S::Error> {
        self.0.serialize_i8(v)
    }
    #[inline]
    fn serialize_i16(self, v: i16) -> Result<S::Ok, S::Error> {
        self.0.serialize_i16(v)
    }
    #[inline]
    fn serialize_i32(self, v: i32) -> Result<S::Ok, S::Error> {
        self.0.serialize_i32(v)
    }
    #[inline]
    fn serialize_i64(self, v: i64) -> Result<S::Ok, S::Error> {
        self.0.serialize_i64(v)
    }
    #[inline]
    fn serialize_i128(self, v: i128) -> Result<S::Ok, S::Error> {
        self.0.serialize_i128(v)
    }
    #[inline]
    fn serialize_u8(self, v: u8) -> Result<S::Ok, S::Error> {
        self.0.serialize_u8(v)
    }
    #[inline]
    fn serialize_u16(self, v: u16) -> Result<S::Ok, S::Error> {
        self.0.serialize_u16(v)
    }
    #[inline]
    fn serialize_u32(self, v: u32) -> Result<S::Ok, S::Error> {
        self.0.serialize_u32(v)
    }
    #[inline]
    fn serialize_u64(self, v: u64) -> Result<S::Ok, S::Error> {
        self.0.serialize_u64(v)
    }
    #[inline]
    fn serialize_u128(self, v: u128) -> Result<S::Ok, S::Error> {
        self.0.serialize_u128(v)
    }
    #[inline]
    fn serialize_f32(self, v: f32) -> Result<S::Ok, S::Error> {
        if !v.is_finite() {
            return Err(not_finite(f64::from(v)));
        }
        self.0.serialize_f32(v)
    }
    #[inline]
    fn serialize_f64(self, v: f64) -> Result<S::Ok, S::Error> {
        if !v.is_finite() {
            return Err(not_finite(v));
        }
        self.0.serialize_f64(v)
    }
    #[inline]
    fn serialize_char(self, v: char) -> Result<S::Ok, S::Error> {
        self.0.serialize_char(v)
    }
    #[inline]
    fn serialize_str(self, v: &str) -> Result<S::Ok, S::Error> {
        self.0.serialize_str(v)
    }
    #[inline]
    fn serialize_bytes(self, v: &[u8]) -> Result<S::Ok, S::Error> {
        self.0.serialize_bytes(v)
    }
    #[inline]
    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_none()
    }
    #[inline]
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&Finite(value))
    }
    #[inline]
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit()
    }
    #[inline]
    fn serialize_unit_struct(self, name: &'static str) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_struct(name)
    }
    #[inline]
    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_variant(name, index, variant)
    }
    #[inline]
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &Finite(value))
    }
    #[inline]
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_variant(name, index, variant, &Finite(value))
    }
    #[inline]
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(FiniteSerializer)
    }
    #[inline]
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(FiniteSerializer)
    }
    #[inline]
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0
            .serialize_tuple_struct(name, len)
            .map(FiniteSerializer)
    }
    #[inline]
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        self.0
            .serialize_tuple_variant(name, index, variant, len)
            .map(FiniteSerializer)
    }
    #[inline]
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(FiniteSerializer)
    }
    #[inline]
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(FiniteSerializer)
    }
    #[inline]
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        self.0
            .serialize_struct_variant(name, index, variant, len)
            .map(FiniteSerializer)
    }
    #[inline]
    fn collect_str<T: ?Sized + std::fmt::Display>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.0.collect_str(value)
    }
    #[inline]
    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// The compound serializers whose elements come one value at a time: each element wrapped in
/// [`Finite`].
macro_rules! forward_elements {
    ($($compound:ident::$method:ident),* $(,)?) => {$(
        impl<S: ser::$compound> ser::$compound for FiniteSerializer<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            #[inline]
            fn $method<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), S::Error> {
                self.0.$method(&Finite(value))
            }
            #[inline]
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )*};
}

forward_elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl<S: ser::SerializeMap> ser::SerializeMap for FiniteSerializer<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    #[inline]
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), S::Error> {
        self.0.serialize_key(&Finite(key))
    }
    #[inline]
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), S::Error> {
        self.0.serialize_value(&Finite(value))
    }
    #[inline]
    fn serialize_entry<K: ?Sized + Serialize, V: ?Sized + Serialize>(
        &mut self,
        key: &K,
        value: &V,
    ) -> Result<(), S::Error> {
        self.0.serialize_entry(&Finite(key), &Finite(value))
    }
    #[inline]
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

/// The compound serializers whose fields come with their names: each value wrapped in
/// [`Finite`].
macro_rules! forward_fields {
    ($($compound:ident),* $(,)?) => {$(
        impl<S: ser::$compound> ser::$compound for FiniteSerializer<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            #[inline]
            fn serialize_field<T: ?Sized + Serialize>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), S::Error> {
                self.0.serialize_field(key, &Finite(value))
            }
            #[inline]
            fn skip_field(&mut self, key: &'static str) -> Result<(), S::Error> {
                self.0.skip_field(key)
            }
            #[inline]
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )*};
}

forward_fields!(SerializeStruct, SerializeStructVariant);
