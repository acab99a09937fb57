"""The classical pronunciation scorer: pocketsphinx's forced alignment and phone loop, a few features, a
ridge map to the experts' scales, and the feedback template. The yardstick every tuned tutor is judged
against, the draft writer of the Dataset tab, and a tutor that works before any fine-tuning.

`engine` (pocketsphinx), `features`, `score_map` (fitting), `fit` (on a build's train split),
`scorer` (one clip in, the template out), `cli` (`python -m pipeline score`). It stands above
`pipeline/data/` (audio decoding, the build) and below `pipeline/tutor/` (Judge), serving and the app.
"""
