"""Write the tf2onnx test fixtures (tests/fixtures/keras_*.tf2onnx.onnx): small seeded Keras
models exported by tf2onnx at opset 13, channels-last inputs as Keras has them.

Run in a separate environment (the product does not depend on TensorFlow), e.g.
``python3.11 -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu==2.15.1 tf2onnx==1.16.1``
(the last Keras 2 release; tf2onnx's ``from_keras`` predates Keras 3), then
``/tmp/tfenv/bin/python scripts/export_keras_fixtures.py``. Keras starts biases at zero (tf2onnx
then drops them) and BatchNormalization at the identity: both are set to seeded values first.
tf2onnx folds BatchNormalization into the Conv before it, writes a Transpose to NCHW after the
input, a Transpose back before a Flatten or a channels-last Split, Dense as Gemm and ReLU6 as Clip.
"""
import argparse
from pathlib import Path

import numpy as np
import tensorflow as tf
import tf2onnx
from tensorflow.keras import Input, Model, layers


def _cnn_16():
    x0 = Input((16, 16, 3), name="input")
    x = layers.MaxPooling2D(2)(layers.Conv2D(8, 3, padding="same", activation="relu")(x0))
    x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(12, 3, padding="same")(x)))
    return Model(x0, layers.Dense(10)(layers.Flatten()(x)), name="keras_cnn_16")


def _mbv2_block_32():
    x0 = Input((32, 32, 3), name="input")
    b = layers.ReLU(6.0)(layers.BatchNormalization()(layers.Conv2D(16, 3, strides=2, padding="same")(x0)))
    y = layers.ReLU(6.0)(layers.BatchNormalization()(layers.Conv2D(48, 1)(b)))
    y = layers.ReLU(6.0)(layers.BatchNormalization()(layers.DepthwiseConv2D(3, padding="same")(y)))
    y = layers.BatchNormalization()(layers.Conv2D(16, 1)(y))
    x = layers.GlobalAveragePooling2D()(layers.Add()([b, y]))
    return Model(x0, layers.Dense(10)(x), name="keras_mbv2_block_32")


def _concat_32():
    x0 = Input((32, 32, 3), name="input")
    x = layers.Concatenate()([layers.Conv2D(8, 3, padding="same", activation="relu")(x0),
                              layers.Conv2D(8, 1, activation="relu")(x0)])
    h1, h2 = layers.Lambda(lambda t: tf.split(t, 2, axis=-1), name="split")(x)
    x = layers.GlobalAveragePooling2D()(layers.Concatenate()([h1, layers.Conv2D(8, 1)(h2)]))
    return Model(x0, layers.Dense(5)(x), name="keras_concat_32")


def _seeded(model, rng):
    for layer in model.layers:
        w = layer.get_weights()
        if isinstance(layer, layers.BatchNormalization):
            c = w[0].shape[0]
            layer.set_weights([rng.uniform(0.5, 1.5, c), rng.normal(0, 0.1, c), rng.normal(0, 0.1, c),
                               rng.uniform(0.5, 1.5, c)])
        elif getattr(layer, "bias", None) is not None:
            w[-1] = rng.normal(0, 0.1, w[-1].shape)
            layer.set_weights(w)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests" / "fixtures")
    out = ap.parse_args().out
    for seed, build in enumerate((_cnn_16, _mbv2_block_32, _concat_32)):
        tf.random.set_seed(1234 + seed)
        model = _seeded(build(), np.random.default_rng(1234 + seed))
        shape = (1,) + tuple(model.input.shape[1:])
        path = out / f"{model.name}.tf2onnx.onnx"
        tf2onnx.convert.from_keras(model, input_signature=[tf.TensorSpec(shape, tf.float32, name="input")],
                                   opset=13, output_path=str(path))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
