//! How long an uploaded audio file plays, for its bill (issue 61): the
//! length a decoder gets from it, never what its header claims.
//!
//! - A WAV file is read here, field by field: its frames are the whole
//!   frames of `data` the file holds, at the `fmt ` chunk's sample rate. A
//!   header whose fields contradict each other (`byte_rate` not `sample_rate
//!   × block_align`, `block_align` not `channels ×` the sample's bytes) or
//!   the file (a `data` chunk longer than what follows it) is refused, a
//!   400 naming `file`: a `byte_rate` of 0xFFFFFFFF once made an 8 MiB,
//!   262-second file cost one second.
//! - MP3, FLAC, Ogg (Opus, Vorbis, FLAC), Matroska/WebM and MP4/M4A are
//!   demultiplexed by `symphonia`, packet by packet, and each packet counts
//!   what its decoder makes of it: for Opus its TOC byte's frames, for MPEG
//!   audio its frame header's samples, for AAC 1,024 samples at the rate
//!   of its AudioSpecificConfig, whatever the container's timestamps say
//!   (those of Matroska and MP4 are the client's to write); other codecs
//!   in those two containers are not measured. A container's own durations
//!   count where they are larger. The longest audio track is the length.
//! - Anything else (a format not read here, a file the demuxer cannot read
//!   to its end, a codec not measured) has no measured length: its bound
//!   is its size at [`UNKNOWN_BYTES_PER_SECOND`], the lowest bitrate a
//!   speech upload plausibly has, so that it is charged too much rather
//!   than too little.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use svc_core::ValidationError;

/// The bytes a second of audio is taken to hold when the file's length is
/// not measured: 4 kbit/s, below Opus's lowest bitrate (6 kbit/s, the
/// codec a browser records speech in) and AMR-NB's (4.75 kbit/s), the
/// lowest of the codecs Whisper servers are sent. (A second of silence
/// can be cheaper still in Opus or FLAC, which are measured.)
pub(super) const UNKNOWN_BYTES_PER_SECOND: u64 = 500;

/// The most chunks read before a WAV file's `data` (`LIST`, `fact`, ...).
const MAX_WAV_CHUNKS: usize = 64;

/// The highest sample rate taken, in Hz (the highest of studio audio).
const MAX_SAMPLE_RATE: u32 = 384_000;

/// How long a file plays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Length {
    /// Measured from what a decoder makes of its frames: seconds.
    Decoded(f64),
    /// Not measured: at most this many seconds (its size at
    /// [`UNKNOWN_BYTES_PER_SECOND`]).
    Bound(f64),
}

impl Length {
    /// Seconds: measured, or the bound.
    pub(crate) fn seconds(self) -> f64 {
        match self {
            Length::Decoded(seconds) | Length::Bound(seconds) => seconds,
        }
    }

    /// The seconds billed once the model has answered, saying `reported`
    /// (or not): a measured length or the model's count, the larger; a
    /// bound gives way to the model's count, which is the decoder's own.
    pub(crate) fn billed(self, reported: Option<f64>) -> f64 {
        match (self, reported.filter(|s| s.is_finite() && *s >= 0.0)) {
            (Length::Decoded(measured), Some(reported)) => measured.max(reported),
            (Length::Bound(_), Some(reported)) => reported,
            (length, None) => length.seconds(),
        }
    }
}

/// How long the file of `bytes` at `path` plays (see the module's doc). A
/// WAV header that contradicts itself or the file is an error naming
/// `file`; a file that cannot be read back is bounded by its size (sending
/// it fails next).
pub(super) fn measure(path: &Path, bytes: u64) -> Result<Length, ValidationError> {
    let bound = Length::Bound(bytes.div_ceil(UNKNOWN_BYTES_PER_SECOND) as f64);
    let Ok(mut file) = File::open(path) else {
        return Ok(bound);
    };
    match wav(&mut file, bytes)? {
        Wav::Seconds(seconds) => return Ok(Length::Decoded(seconds)),
        Wav::OtherCodec => return Ok(bound),
        Wav::Not => {}
    }
    if file.seek(SeekFrom::Start(0)).is_err() {
        return Ok(bound);
    }
    // A demuxer that panics on a hostile file must not take the upload's
    // thread with it: the file is then one not measured.
    let demuxed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| demux(file, bytes)));
    Ok(match demuxed {
        Ok(Some(seconds)) => Length::Decoded(seconds),
        _ => bound,
    })
}

/// The seconds a WAV file of `bytes` plays (see [`measure`]): `None` for
/// a file that is not WAV, or a codec not measured; `Err` with the
/// refusal's message. For the fuzz target.
#[doc(hidden)]
pub fn fuzz_wav_seconds(bytes: &[u8]) -> Option<Result<f64, String>> {
    let mut reader = std::io::Cursor::new(bytes);
    match wav(&mut reader, bytes.len() as u64) {
        Ok(Wav::Seconds(seconds)) => Some(Ok(seconds)),
        Ok(Wav::Not | Wav::OtherCodec) => None,
        Err(e) => Some(Err(e.message)),
    }
}

/// What a file's RIFF header says.
enum Wav {
    /// Not a WAV file.
    Not,
    /// A WAV file of this many seconds.
    Seconds(f64),
    /// A WAV file of a codec not measured (ADPCM, GSM, ...).
    OtherCodec,
}

/// A WAV file's `fmt ` chunk, as far as it is read.
struct Format {
    tag: u16,
    channels: u16,
    sample_rate: u32,
    byte_rate: u32,
    block_align: u16,
    bits: u16,
}

const WAVE_FORMAT_PCM: u16 = 1;
const WAVE_FORMAT_IEEE_FLOAT: u16 = 3;
const WAVE_FORMAT_ALAW: u16 = 6;
const WAVE_FORMAT_MULAW: u16 = 7;
const WAVE_FORMAT_EXTENSIBLE: u16 = 0xFFFE;

fn refused(message: String) -> ValidationError {
    ValidationError::new("file", message)
}

/// Reads a RIFF (or RF64) WAVE file's chunks up to its `data`.
fn wav(file: &mut (impl Read + Seek), length: u64) -> Result<Wav, ValidationError> {
    let mut head = [0u8; 12];
    if file.read_exact(&mut head).is_err()
        || !matches!(&head[0..4], b"RIFF" | b"RF64")
        || &head[8..12] != b"WAVE"
    {
        return Ok(Wav::Not);
    }
    let cut = |_| refused("the WAV file ends inside a chunk's header".into());
    let mut at = 12u64;
    let mut format: Option<Format> = None;
    // RF64's `ds64` chunk holds the sizes too large for 32 bits.
    let mut data_64 = None;
    for _ in 0..MAX_WAV_CHUNKS {
        let mut chunk = [0u8; 8];
        file.read_exact(&mut chunk).map_err(|_| {
            refused(if format.is_none() {
                "the WAV file has no `fmt ` chunk".into()
            } else {
                "the WAV file has no `data` chunk".into()
            })
        })?;
        let id = &chunk[0..4];
        let size = u64::from(u32_at(&chunk, 4));
        let body = at + 8;
        let held = length.saturating_sub(body);
        match id {
            b"data" => {
                let Some(format) = format else {
                    return Err(refused(
                        "the WAV file's `data` chunk comes before its `fmt ` chunk".into(),
                    ));
                };
                let size = match data_64 {
                    Some(size_64) if size == u64::from(u32::MAX) => size_64,
                    _ => size,
                };
                let data = size_of_data(size, held).ok_or_else(|| {
                    refused(format!(
                        "the WAV file's `data` chunk says it holds {size} bytes, but {held} follow its header"
                    ))
                })?;
                return wav_seconds(&format, data);
            }
            b"fmt " => {
                if format.is_some() {
                    return Err(refused("the WAV file has two `fmt ` chunks".into()));
                }
                format = Some(read_format(file, size)?);
            }
            b"ds64" if &head[0..4] == b"RF64" && size >= 16 => {
                let mut ds64 = [0u8; 16];
                file.read_exact(&mut ds64).map_err(cut)?;
                data_64 = Some(u64::from_le_bytes(ds64[8..16].try_into().unwrap_or([0; 8])));
            }
            _ => {}
        }
        if size > held {
            return Err(refused(format!(
                "the WAV file's `{}` chunk says it holds {size} bytes, but {held} follow its header",
                String::from_utf8_lossy(id)
            )));
        }
        at = body + size + (size & 1);
        file.seek(SeekFrom::Start(at)).map_err(cut)?;
    }
    Err(refused(format!(
        "the WAV file has more than {MAX_WAV_CHUNKS} chunks before its `data`"
    )))
}

/// The bytes billed as audio: all the file holds after the `data` header
/// (`held`), whatever the size declared (`size`): a decoder such as
/// ffmpeg's plays every `data` chunk of a file, and what follows the
/// declared data may be another one (a 2-byte `data` chunk before the real
/// one was billed nothing). A stream's writer, which cannot seek back,
/// leaves the size unknown (0, or all ones); `None` when the file holds
/// less than declared.
fn size_of_data(size: u64, held: u64) -> Option<u64> {
    if size == 0 || size == u64::from(u32::MAX) || size == u64::MAX {
        Some(held)
    } else {
        (size <= held).then_some(held)
    }
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Reads a `fmt ` chunk of `size` bytes (the reader at its body).
fn read_format(file: &mut impl Read, size: u64) -> Result<Format, ValidationError> {
    if size < 16 {
        return Err(refused(format!(
            "the WAV file's `fmt ` chunk has {size} bytes; it has at least 16"
        )));
    }
    let mut fmt = [0u8; 40];
    let read = usize::try_from(size.min(40)).unwrap_or(40);
    file.read_exact(&mut fmt[..read])
        .map_err(|_| refused("the WAV file ends inside its `fmt ` chunk".into()))?;
    let mut tag = u16_at(&fmt, 0);
    if tag == WAVE_FORMAT_EXTENSIBLE {
        if read < 40 {
            return Err(refused(format!(
                "the WAV file's `fmt ` chunk is WAVE_FORMAT_EXTENSIBLE in {size} bytes; it takes 40"
            )));
        }
        // The sub-format GUID begins with the plain format's tag.
        tag = u16_at(&fmt, 24);
    }
    Ok(Format {
        tag,
        channels: u16_at(&fmt, 2),
        sample_rate: u32_at(&fmt, 4),
        byte_rate: u32_at(&fmt, 8),
        block_align: u16_at(&fmt, 12),
        bits: u16_at(&fmt, 14),
    })
}

/// The seconds `data` bytes of `format` play: its whole frames at its
/// sample rate, once its fields agree with each other.
fn wav_seconds(format: &Format, data: u64) -> Result<Wav, ValidationError> {
    let Format {
        tag,
        channels,
        sample_rate,
        byte_rate,
        block_align,
        bits,
    } = *format;
    if !matches!(
        tag,
        WAVE_FORMAT_PCM | WAVE_FORMAT_IEEE_FLOAT | WAVE_FORMAT_ALAW | WAVE_FORMAT_MULAW
    ) {
        return Ok(Wav::OtherCodec);
    }
    if channels == 0 || bits == 0 || bits > 64 {
        return Err(refused(format!(
            "the WAV file's `fmt ` chunk says {channels} channels of {bits}-bit samples"
        )));
    }
    if sample_rate == 0 || sample_rate > MAX_SAMPLE_RATE {
        return Err(refused(format!(
            "the WAV file's sample rate is {sample_rate} Hz; it must be 1 to {MAX_SAMPLE_RATE}"
        )));
    }
    let frame = u32::from(channels) * u32::from(bits.div_ceil(8));
    if u32::from(block_align) != frame {
        return Err(refused(format!(
            "the WAV file's block_align is {block_align}, but {channels} channels of {bits}-bit samples take {frame} bytes a frame"
        )));
    }
    if u64::from(byte_rate) != u64::from(sample_rate) * u64::from(frame) {
        return Err(refused(format!(
            "the WAV file's byte_rate is {byte_rate}, but {sample_rate} frames a second of {frame} bytes are {} bytes a second",
            u64::from(sample_rate) * u64::from(frame)
        )));
    }
    let frames = data / u64::from(frame);
    Ok(Wav::Seconds(frames as f64 / f64::from(sample_rate)))
}

/// The seconds the longest audio track of a file `symphonia` can read
/// plays, packet by packet (see the module's doc); `None` when it cannot
/// read the file to its end, or a track's codec is not measured where
/// only the container says how long its packets are.
fn demux(file: File, bytes: u64) -> Option<f64> {
    use std::collections::HashMap;

    use symphonia::core::codecs::CodecParameters;
    use symphonia::core::codecs::audio::well_known::{
        CODEC_ID_AAC, CODEC_ID_MP1, CODEC_ID_MP2, CODEC_ID_MP3, CODEC_ID_OPUS,
    };
    use symphonia::core::errors::Error;
    use symphonia::core::formats::FormatOptions;
    use symphonia::core::formats::probe::Hint;
    use symphonia::core::formats::well_known::{FORMAT_ID_ISOMP4, FORMAT_ID_MKV};
    use symphonia::core::io::MediaSourceStream;
    use symphonia::core::meta::MetadataOptions;

    let stream = MediaSourceStream::new(Box::new(file), Default::default());
    let mut reader = symphonia::default::get_probe()
        .probe(
            &Hint::new(),
            stream,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .ok()?;
    // Matroska's and MP4's timestamps are the writer's to set; the other
    // containers' packet durations come from the codec's own headers.
    let container_timed = matches!(
        reader.format_info().format,
        FORMAT_ID_ISOMP4 | FORMAT_ID_MKV
    );
    let mut tracks = HashMap::new();
    for track in reader.tracks() {
        let Some(CodecParameters::Audio(params)) = &track.codec_params else {
            continue;
        };
        let codec = if params.codec == CODEC_ID_OPUS {
            Codec::Opus
        } else if [CODEC_ID_MP1, CODEC_ID_MP2, CODEC_ID_MP3].contains(&params.codec) {
            Codec::Mpeg
        } else if params.codec == CODEC_ID_AAC {
            let rate = params
                .extra_data
                .as_deref()
                .and_then(aac_sample_rate)
                .or(params.sample_rate)
                .filter(|r| *r > 0)?;
            Codec::Aac(rate)
        } else if container_timed {
            return None;
        } else {
            Codec::Other
        };
        let time_base = track
            .time_base
            .map(|t| f64::from(t.numer.get()) / f64::from(t.denom.get()));
        tracks.insert(track.id, (codec, time_base, 0.0f64));
    }
    if tracks.is_empty() {
        return None;
    }
    // Each packet takes at least a byte (a few more in any container):
    // more packets than bytes is a demuxer going round.
    let mut packets = 0u64;
    loop {
        let packet = match reader.next_packet() {
            Ok(Some(packet)) => packet,
            Ok(None) => break,
            // A file cut short ends where it is cut.
            Err(Error::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(_) => return None,
        };
        packets += 1;
        if packets > bytes {
            return None;
        }
        let Some((codec, time_base, total)) = tracks.get_mut(&packet.track_id) else {
            continue;
        };
        let stated = time_base.map_or(0.0, |t| packet.block_dur().get() as f64 * t);
        let decoded = match codec {
            Codec::Opus => opus_seconds(&packet.data),
            Codec::Mpeg => mpeg_seconds(&packet.data),
            Codec::Aac(rate) => Some(1024.0 / f64::from(*rate)),
            Codec::Other => None,
        };
        let seconds = match decoded {
            Some(decoded) => decoded.max(stated),
            None if container_timed => return None,
            None => stated,
        };
        *total += seconds;
    }
    tracks
        .values()
        .map(|(_, _, total)| *total)
        .reduce(f64::max)
        .filter(|s| s.is_finite())
}

/// A track's codec, as far as its packets' lengths are read here.
#[derive(Clone, Copy)]
enum Codec {
    Opus,
    /// MPEG-1/2 audio layer I, II or III.
    Mpeg,
    /// AAC at this (core) sample rate.
    Aac(u32),
    /// Another codec, whose packets' lengths the container's (a native
    /// one's: Ogg's, FLAC's) headers tell.
    Other,
}

/// The seconds an Opus packet decodes to (RFC 6716 §3.1): its TOC byte's
/// frame size times its frame count, at most 120 ms.
fn opus_seconds(packet: &[u8]) -> Option<f64> {
    let toc = *packet.first()?;
    let config = toc >> 3;
    let frame_ms = match config {
        // SILK: 10, 20, 40, 60 ms.
        0..=11 => [10.0, 20.0, 40.0, 60.0][usize::from(config % 4)],
        // Hybrid: 10, 20 ms.
        12..=15 => [10.0, 20.0][usize::from(config % 2)],
        // CELT: 2.5, 5, 10, 20 ms.
        _ => [2.5, 5.0, 10.0, 20.0][usize::from(config % 4)],
    };
    let frames = match toc & 3 {
        0 => 1.0,
        1 | 2 => 2.0,
        _ => f64::from(*packet.get(1)? & 0x3F),
    };
    Some((frame_ms * frames).min(120.0) / 1000.0)
}

/// The seconds an MPEG audio frame decodes to, from its 4-byte header:
/// its samples (384 for layer I, 1,152 for layer II and MPEG-1 layer III,
/// 576 for MPEG-2 and 2.5 layer III) at its sample rate.
fn mpeg_seconds(frame: &[u8]) -> Option<f64> {
    let header = frame.get(..4)?;
    if header[0] != 0xFF || header[1] & 0xE0 != 0xE0 {
        return None;
    }
    let version = (header[1] >> 3) & 3; // 0: 2.5, 2: 2, 3: 1
    let layer = (header[1] >> 1) & 3; // 1: III, 2: II, 3: I
    let rate_index = usize::from((header[2] >> 2) & 3);
    let base = [44_100.0, 48_000.0, 32_000.0].get(rate_index)?;
    let rate = match version {
        3 => *base,
        2 => base / 2.0,
        0 => base / 4.0,
        _ => return None,
    };
    let samples = match (layer, version) {
        (3, _) => 384.0,
        (2, _) | (1, 3) => 1152.0,
        (1, _) => 576.0,
        _ => return None,
    };
    Some(samples / rate)
}

/// The sample rate of an AAC AudioSpecificConfig (ISO 14496-3 §1.6.2.1):
/// the core's, which each frame's 1,024 samples are at (SBR doubles both).
fn aac_sample_rate(config: &[u8]) -> Option<u32> {
    const RATES: [u32; 13] = [
        96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025,
        8_000, 7_350,
    ];
    if config.len() < 2 {
        return None;
    }
    let bits = config
        .iter()
        .take(8)
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
        << (8 * (8 - config.len().min(8)));
    let take = |from: u32, n: u32| ((bits >> (64 - from - n)) & ((1 << n) - 1)) as u32;
    let object = take(0, 5);
    let at = if object == 31 { 11 } else { 5 };
    match take(at, 4) {
        15 if config.len() >= 5 => Some(take(at + 4, 24)),
        index => RATES.get(index as usize).copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PCM WAV file of `frames` frames at `rate` Hz, `channels` channels
    /// of 16-bit samples, with a `LIST` chunk before its data; `edit`
    /// changes its header's fields first.
    fn wav_file(
        rate: u32,
        channels: u16,
        frames: u32,
        edit: impl FnOnce(&mut WavHeader),
    ) -> Vec<u8> {
        let mut header = WavHeader {
            tag: 1,
            channels,
            rate,
            byte_rate: rate * u32::from(channels) * 2,
            block_align: channels * 2,
            bits: 16,
            data: frames * u32::from(channels) * 2,
        };
        let bytes = header.data;
        edit(&mut header);
        let list = b"INFOISFT\x04\x00\x00\x00svc\x00";
        let mut out = Vec::new();
        out.extend_from_slice(b"RIFF");
        out.extend_from_slice(&(4 + 24 + 8 + list.len() as u32 + 8 + bytes).to_le_bytes());
        out.extend_from_slice(b"WAVEfmt ");
        out.extend_from_slice(&16u32.to_le_bytes());
        out.extend_from_slice(&header.tag.to_le_bytes());
        out.extend_from_slice(&header.channels.to_le_bytes());
        out.extend_from_slice(&header.rate.to_le_bytes());
        out.extend_from_slice(&header.byte_rate.to_le_bytes());
        out.extend_from_slice(&header.block_align.to_le_bytes());
        out.extend_from_slice(&header.bits.to_le_bytes());
        out.extend_from_slice(b"LIST");
        out.extend_from_slice(&(list.len() as u32).to_le_bytes());
        out.extend_from_slice(list);
        out.extend_from_slice(b"data");
        out.extend_from_slice(&header.data.to_le_bytes());
        out.resize(out.len() + bytes as usize, 0);
        out
    }

    /// The fields of [`wav_file`]'s header.
    struct WavHeader {
        tag: u16,
        channels: u16,
        rate: u32,
        byte_rate: u32,
        block_align: u16,
        bits: u16,
        data: u32,
    }

    fn measured(bytes: &[u8]) -> Result<Length, ValidationError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, bytes).unwrap();
        measure(&path, bytes.len() as u64)
    }

    #[test]
    fn a_wav_file_plays_its_whole_frames_at_its_sample_rate() {
        let three = wav_file(16_000, 1, 48_000, |_| {});
        assert_eq!(measured(&three).unwrap(), Length::Decoded(3.0));
        let stereo = wav_file(8_000, 2, 20_000, |_| {});
        assert_eq!(measured(&stereo).unwrap(), Length::Decoded(2.5));
        // Written as a stream: a data size of 0 or all ones is the file's.
        for unknown in [0, u32::MAX] {
            let streamed = wav_file(16_000, 1, 32_000, |h| h.data = unknown);
            assert_eq!(measured(&streamed).unwrap(), Length::Decoded(2.0));
        }
        // What follows the declared data is audio a decoder plays too (a
        // second `data` chunk): billed, not skipped.
        let mut hidden = wav_file(16_000, 1, 1, |_| {});
        hidden.extend_from_slice(b"data");
        hidden.extend_from_slice(&64_000u32.to_le_bytes());
        hidden.resize(hidden.len() + 64_000, 0);
        let Length::Decoded(seconds) = measured(&hidden).unwrap() else {
            panic!("not measured");
        };
        assert!(seconds >= 2.0, "{seconds}");
        // A trailing half frame is not a frame.
        let mut odd = wav_file(16_000, 1, 16_000, |h| h.data += 1);
        odd.push(0);
        assert_eq!(measured(&odd).unwrap(), Length::Decoded(1.0));
        // ADPCM is not measured: its size bounds it.
        let adpcm = wav_file(16_000, 1, 16_000, |h| h.tag = 2);
        assert_eq!(
            measured(&adpcm).unwrap(),
            Length::Bound(adpcm.len().div_ceil(500) as f64)
        );
    }

    #[test]
    fn a_wav_header_that_contradicts_itself_or_the_file_is_refused() {
        // A word of the refusal, and the lie.
        type Lie = (&'static str, fn(&mut WavHeader));
        let lies: [Lie; 7] = [
            ("byte_rate", |h| h.byte_rate = u32::MAX),
            ("byte_rate", |h| h.byte_rate *= 2),
            ("block_align", |h| h.block_align = 64),
            ("sample rate", |h| h.rate = 0),
            ("sample rate", |h| {
                h.rate = 4_000_000;
                h.byte_rate = 8_000_000;
            }),
            ("channels", |h| h.channels = 0),
            ("holds", |h| h.data *= 2),
        ];
        for (word, lie) in lies {
            let e = measured(&wav_file(16_000, 1, 16_000, lie)).unwrap_err();
            assert_eq!(e.param, "file");
            assert!(e.message.contains(word), "{word}: {}", e.message);
        }
        // A chunk that runs past the file's end hides nothing.
        let mut hiding = wav_file(16_000, 1, 16_000, |_| {});
        let list = hiding.windows(4).position(|w| w == b"LIST").unwrap();
        hiding[list + 4..list + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = measured(&hiding).unwrap_err();
        assert!(e.message.contains("`LIST` chunk"), "{}", e.message);
        let e = measured(b"RIFF\x04\x00\x00\x00WAVE").unwrap_err();
        assert!(e.message.contains("no `fmt `"), "{}", e.message);
    }

    #[test]
    fn a_file_of_no_format_read_here_is_bounded_by_its_size() {
        assert_eq!(measured(&[7u8; 40_000]).unwrap(), Length::Bound(80.0));
        assert_eq!(measured(b"").unwrap(), Length::Bound(0.0));
    }

    #[test]
    fn the_models_count_wins_over_a_measure_but_not_a_bound_when_larger() {
        assert_eq!(Length::Decoded(3.0).billed(Some(5.0)), 5.0);
        assert_eq!(Length::Decoded(3.0).billed(Some(1.0)), 3.0);
        assert_eq!(Length::Decoded(3.0).billed(None), 3.0);
        assert_eq!(Length::Bound(80.0).billed(Some(2.0)), 2.0);
        assert_eq!(Length::Bound(80.0).billed(None), 80.0);
        assert_eq!(Length::Bound(80.0).billed(Some(f64::NAN)), 80.0);
    }

    /// The fixtures' files: three seconds of a tone in each format.
    fn fixture(name: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/audio")
            .join(name);
        std::fs::read(&path).unwrap()
    }

    #[test]
    fn compressed_files_are_measured_packet_by_packet() {
        for name in [
            "speech.ogg",
            "speech.webm",
            "speech.mp3",
            "speech.m4a",
            "speech.flac",
            "speech.oga",
        ] {
            let bytes = fixture(name);
            let Length::Decoded(seconds) = measured(&bytes).unwrap() else {
                panic!("{name} is not measured");
            };
            // Whole packets: up to a packet past the three seconds. (At
            // 16,000 bytes a second, as before, the Opus was one second.)
            assert!((3.0..=3.2).contains(&seconds), "{name}: {seconds} s");
        }
    }

    #[test]
    fn a_containers_timestamps_do_not_shorten_what_its_packets_decode_to() {
        // The MP4's media header says its track ticks a thousand times
        // faster: the AAC frames still decode to three seconds.
        let mut m4a = fixture("speech.m4a");
        let mdhd = m4a.windows(4).position(|w| w == b"mdhd").unwrap();
        let timescale = mdhd + 4 + 4 + 8;
        let ticks = u32::from_be_bytes(m4a[timescale..timescale + 4].try_into().unwrap());
        m4a[timescale..timescale + 4].copy_from_slice(&(ticks * 1000).to_be_bytes());
        let Length::Decoded(seconds) = measured(&m4a).unwrap() else {
            panic!("not measured");
        };
        assert!((3.0..=3.2).contains(&seconds), "{seconds} s");
    }

    #[test]
    fn packets_count_what_their_decoder_makes_of_them() {
        // Opus: CELT 20 ms, one frame; SILK 60 ms, two; code 3, 6 x 20 ms.
        assert_eq!(opus_seconds(&[31 << 3]), Some(0.02));
        assert_eq!(opus_seconds(&[(3 << 3) | 1]), Some(0.12));
        assert_eq!(opus_seconds(&[(31 << 3) | 3, 6]), Some(0.12));
        assert_eq!(opus_seconds(&[(31 << 3) | 3, 48]), Some(0.12));
        assert_eq!(opus_seconds(&[]), None);
        // MPEG-1 layer III at 44.1 kHz; MPEG-2 layer III at 16 kHz.
        assert_eq!(
            mpeg_seconds(&[0xFF, 0xFB, 0x90, 0x00]),
            Some(1152.0 / 44_100.0)
        );
        assert_eq!(
            mpeg_seconds(&[0xFF, 0xF3, 0x88, 0x00]),
            Some(576.0 / 16_000.0)
        );
        assert_eq!(mpeg_seconds(&[0x00, 0xFB, 0x90, 0x00]), None);
        // AAC-LC at 44.1 kHz; at 16 kHz; an explicit 12 kHz.
        assert_eq!(aac_sample_rate(&[0x12, 0x10]), Some(44_100));
        assert_eq!(aac_sample_rate(&[0x14, 0x08]), Some(16_000));
        assert_eq!(
            aac_sample_rate(&[0x17, 0x80, 0x17, 0x70, 0x08]),
            Some(12_000)
        );
    }
}
