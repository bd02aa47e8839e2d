"""Vision expert tools: captioning, VQA, detection, classification, segmentation, depth.

``TOOLS``: tool name -> (module, class, one line for tool listings; the full
description lives on the class). Light: nothing is imported until a tool is built.
"""

from __future__ import annotations

__all__ = ["TOOLS"]

TOOLS: dict[str, tuple[str, str, str]] = {
    "image-captioning": ("chatgpt_tool_hub.experts.vision", "ImageCaptioningTool",
             "Describe an image in one sentence (BLIP; expert model, runs on GPU when available)."),
    "visual-question-answering": ("chatgpt_tool_hub.experts.vqa", "VisualQuestionAnsweringTool",
             "Answer a question about an image (BLIP VQA; expert model)."),
    "object-detection": ("chatgpt_tool_hub.experts.vision", "ObjectDetectionTool",
             "Find objects in an image with boxes, and draw them (YOLOS; expert model)."),
    "image-classification": ("chatgpt_tool_hub.experts.vision", "ImageClassificationTool",
             "Top-5 labels of an image (ViT; expert model)."),
    "image-segmentation": ("chatgpt_tool_hub.experts.dense", "ImageSegmentationTool",
             "Split an image into labelled regions with their area, and paint them (SegFormer; expert model)."),
    "depth-estimation": ("chatgpt_tool_hub.experts.dense", "DepthEstimationTool",
             "Estimate depth and save a depth map image (Depth Anything V2; expert model)."),
    "zero-shot-object-detection": ("chatgpt_tool_hub.experts.grounding", "ZeroShotObjectDetectionTool",
             "Find the things you name in an image, with boxes, and draw them (OWL-ViT; expert model)."),
    "segment-by-text": ("chatgpt_tool_hub.experts.grounding", "SegmentByTextTool",
             "Cut out the things you name in an image: masks and a mask image (OWL-ViT + SAM; expert model)."),
    "document-question-answering": ("chatgpt_tool_hub.experts.documents", "DocumentQuestionAnsweringTool",
             "Answer a question about a document image, no OCR needed (Donut DocVQA; expert model)."),
}
