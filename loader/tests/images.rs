//! The loader with the real image pipeline on real JPEGs (the decode corpus): batches equal
//! the pipeline run directly on each sample with the same key, whatever the worker count, and
//! bad files are reported by path, op and cause.

use std::fs;
use std::path::{Path, PathBuf};

use ferroloader_loader::transforms::fused::OutputSlot;
use ferroloader_loader::transforms::rng::sample_rng;
use ferroloader_loader::transforms::spec::{OutputDtype, PipelineSpec};
use ferroloader_loader::{
    BatchImages, ErrorPolicy, ImageFolder, ImagePipeline, Loader, LoaderError, LoaderOptions, Op,
    Source, TransformOp,
};

use crate::fixtures;

fn corpus_dir() -> PathBuf {
    fixtures::fixture_dir("decode", "make fixtures")
}

/// An ImageFolder of the corpus' small and medium JPEGs split over 3 classes, plus `extra`
/// (name, bytes) files in class `b`.
fn folder(tmp: &Path, extra: &[(&str, &[u8])]) -> ImageFolder {
    let jpegs = fixtures::small_corpus_jpegs();
    for (i, path) in jpegs.iter().enumerate() {
        let class = ["a", "b", "c"][i % 3];
        fs::create_dir_all(tmp.join(class)).expect("mkdir");
        fs::copy(path, tmp.join(class).join(path.file_name().expect("name"))).expect("copy");
    }
    for (name, bytes) in extra {
        fs::write(tmp.join("b").join(name), bytes).expect("write");
    }
    ImageFolder::new(tmp).expect("folder")
}

#[test]
fn batches_equal_the_pipeline_run_per_sample() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = folder(tmp.path(), &[]);
    let spec = PipelineSpec::imagenet_train(48);
    let direct = ImagePipeline::new(spec.clone()).expect("plans");
    let mut ctx = direct.pipeline().new_context().expect("context");
    let mut expected = vec![0f32; 3 * 48 * 48];
    let mut buf = Vec::new();
    let mut outputs = Vec::new();
    for workers in [1, 2] {
        let options = LoaderOptions::default()
            .batch_size(5)
            .num_workers(workers)
            .shuffle(true)
            .seed(7);
        let loader = Loader::new(
            folder.clone(),
            ImagePipeline::new(spec.clone()).expect("plans"),
            options,
        )
        .expect("loader");
        let mut seen = 0;
        let mut all = Vec::new();
        for batch in loader.epoch(3) {
            let batch = batch.expect("batch");
            assert_eq!(batch.shape()[1..], [3, 48, 48]);
            let BatchImages::F32(images) = batch.images() else {
                panic!("f32 output")
            };
            for (slot, &index) in batch.indices().iter().enumerate() {
                let bytes = folder.read(index, &mut buf).expect("read");
                direct
                    .pipeline()
                    .run(
                        bytes,
                        &mut sample_rng(7, 3, index as u64),
                        &mut ctx,
                        OutputSlot::F32(&mut expected),
                        &mut (),
                    )
                    .expect("runs");
                assert!(
                    images[slot * expected.len()..(slot + 1) * expected.len()] == expected[..],
                    "sample {index}"
                );
                assert_eq!(batch.labels()[slot], folder.label(index));
                seen += 1;
            }
            all.extend_from_slice(images);
        }
        assert_eq!(seen, folder.len());
        outputs.push(all);
    }
    assert!(outputs[0] == outputs[1], "1 and 2 workers differ");
}

#[test]
fn bad_files_are_raised_or_skipped_with_path_op_and_cause() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let good = fs::read(corpus_dir().join("jpeg_420_q75.jpg")).expect("fixture");
    let truncated = &good[..good.len() / 2];
    let folder = folder(
        tmp.path(),
        &[
            ("zz_truncated.jpg", truncated),
            ("zz_html.jpg", b"<html></html>"),
        ],
    );
    let spec = PipelineSpec::imagenet_train(32).output(OutputDtype::Uint8);

    let raise = Loader::new(
        folder.clone(),
        ImagePipeline::new(spec.clone()).expect("plans"),
        LoaderOptions::default().batch_size(4).num_workers(2),
    )
    .expect("loader");
    let err = raise
        .epoch(0)
        .find_map(|b| b.err())
        .expect("a bad file raises");
    let LoaderError::Transform { .. } = &err else {
        panic!("wrong error: {err}")
    };
    let text = err.to_string();
    assert!(text.contains("zz_"), "names the file: {text}");
    assert_eq!(err.op(), Some(Op::Transform(TransformOp::Decode)), "{text}");
    // The loader still runs a next epoch after the error.
    assert!(raise.epoch(1).next().is_some());

    let skip = Loader::new(
        folder.clone(),
        ImagePipeline::new(spec).expect("plans"),
        LoaderOptions::default()
            .batch_size(4)
            .num_workers(2)
            .on_error(ErrorPolicy::Skip),
    )
    .expect("loader");
    let mut iter = skip.epoch(0);
    let delivered: usize = iter
        .by_ref()
        .map(|b| b.expect("skip never raises").len())
        .sum();
    assert_eq!(delivered, folder.len() - 2);
    let mut causes: Vec<String> = iter.skipped().iter().map(|s| s.error.to_string()).collect();
    causes.sort();
    assert_eq!(causes.len(), 2);
    assert!(
        causes[0].contains("zz_html") && causes[0].contains("not a supported image"),
        "{causes:?}"
    );
    assert!(
        causes[1].contains("zz_truncated") && causes[1].contains("truncated"),
        "{causes:?}"
    );
}
